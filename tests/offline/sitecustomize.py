"""Cut a Python process off the network: connecting anywhere but loopback raises.

Put this folder first on PYTHONPATH of a subprocess (the notebook kernels of
tests/docs/test_tutorials.py) to prove that it needs no network; in-process, tests
monkeypatch `socket.socket.connect` and `connect_ex` with the functions below.
"""

import ipaddress
import socket

_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _is_local(address):
    if not isinstance(address, tuple):  # AF_UNIX paths
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a host name that is not localhost


def _refuse(address):
    raise OSError(f"network access to {address!r} is disabled in this test "
                  "(tests/offline/sitecustomize.py)")


def connect(self, address):
    if not _is_local(address):
        _refuse(address)
    return _connect(self, address)


def connect_ex(self, address):
    if not _is_local(address):
        _refuse(address)
    return _connect_ex(self, address)


if __name__ == "sitecustomize":  # imported at start-up, not by a test
    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
