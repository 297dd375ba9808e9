"""One bounded HTTP(S) transfer into an open file: the catalogue's downloads.

Bounded in size (never more than the caller's limit: an endless body from a
mirror stops there), in time for the connection and the headers together
(`HEADERS_DEADLINE_S`: a server sending its status line a byte at a time cannot
hold the client), and for the body (`DOWNLOAD_TIMEOUT_S` windows that must each
bring `MIN_BYTES_PER_WINDOW`: a dead and a trickling server both fail in about
that time). Credentials in the URL (`https://user:password@host/...`) are sent as
HTTP basic auth and never shown: messages use `redact(url)`.
"""

import base64
import http.client
import socket
import threading
import time
import urllib.parse
import urllib.request

__all__ = ["stream", "redact", "DOWNLOAD_TIMEOUT_S", "HEADERS_DEADLINE_S", "MIN_BYTES_PER_WINDOW"]

DOWNLOAD_TIMEOUT_S = 10
HEADERS_DEADLINE_S = 10
MIN_BYTES_PER_WINDOW = 64 << 10


def redact(url):
    """`url` without the user name and password it may carry."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))


def stream(url, handle, limit):
    """Copies `url` into `handle`; refuses a body over `limit` bytes, a stalled, slow or
    truncated transfer (raising OSError or http.client.HTTPException, as urllib does)."""
    request = _request(url)
    deadline = _Deadline(HEADERS_DEADLINE_S)
    opener = urllib.request.build_opener(_handler(urllib.request.HTTPHandler, deadline),
                                         _handler(urllib.request.HTTPSHandler, deadline))
    # The timeout bounds each network step of this request alone; no global setting.
    try:
        response = opener.open(request, timeout=DOWNLOAD_TIMEOUT_S)
    except OSError:
        if deadline.expired:
            raise TimeoutError(f"no response headers within {HEADERS_DEADLINE_S} s") from None
        raise
    finally:
        deadline.cancel()
    if deadline.expired:  # headers cut short by the shutdown can parse as a whole response
        response.close()
        raise TimeoutError(f"no response headers within {HEADERS_DEADLINE_S} s")
    with response:
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise ConnectionError(f"the server announces {int(length)} bytes, more than the "
                                  f"{limit} this file can have")
        total, window_start, window_bytes = 0, time.monotonic(), 0
        while chunk := response.read1(1 << 20):
            total += len(chunk)
            if total > limit:
                raise ConnectionError(f"the server sent more than the {limit} bytes this file "
                                      "can have")
            handle.write(chunk)
            window_bytes += len(chunk)
            if time.monotonic() - window_start >= DOWNLOAD_TIMEOUT_S:
                if window_bytes < MIN_BYTES_PER_WINDOW:
                    raise TimeoutError(f"the download stalled: {window_bytes} bytes in the last "
                                       f"{DOWNLOAD_TIMEOUT_S} s")
                window_start, window_bytes = time.monotonic(), 0
        if length is not None and total != int(length):
            raise ConnectionError(f"the connection closed after {total} of {length} bytes")


def _request(url):
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return urllib.request.Request(url)
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    # Kept off redirects to other hosts by urllib (it drops Authorization there).
    return urllib.request.Request(bare, headers={"Authorization": f"Basic {token}"})


class _Deadline:
    """Shuts the connection's socket down when the headers have not come in time."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds
        self.expired, self._timer, self._sock = False, None, None

    def arm(self, sock):
        self.cancel()  # a redirect's new connection gets the time that is left
        self._sock = sock
        self._timer = threading.Timer(max(0.0, self.end - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self):
        self.expired = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
        except OSError:
            pass

    def cancel(self):
        if self._timer is not None:
            self._timer.cancel()


def _handler(base, deadline):
    """`base` (urllib's HTTP or HTTPS handler) whose connections arm `deadline` on connect."""
    secure = base is urllib.request.HTTPSHandler
    connection_class = http.client.HTTPSConnection if secure else http.client.HTTPConnection

    class Connection(connection_class):
        def connect(self):
            super().connect()
            deadline.arm(self.sock)

    if secure:
        class Handler(base):
            def https_open(self, request):
                return self.do_open(Connection, request, context=self._context)
    else:
        class Handler(base):
            def http_open(self, request):
                return self.do_open(Connection, request)
    return Handler()
