"""A Hugging Face Hub on 127.0.0.1 for the tests: the four HTTP calls huggingface_hub's
`snapshot_download` makes (a revision's commit, its file tree, a file's metadata, the file),
serving local folders as repositories at one commit each. The real download and caching code
then runs as against the Hub: no network, no stand-in for huggingface_hub.

    with hub_server({"owner/name": folder}) as hub:
        use_hub(monkeypatch, hub.endpoint, tmp_path / "hf-cache")
        ...                          # hf:// weights now come from it; hub.requests lists calls
"""

import contextlib
import hashlib
import http.server
import json
import os
import threading
import urllib.parse

__all__ = ["hub_server", "use_hub", "COMMIT"]

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _Hub(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _file(self, repo, name):
        folder = self.server.repos.get(repo)
        path = os.path.join(folder, name) if folder else None
        return path if path and os.path.isfile(path) and name in os.listdir(folder) else None

    def _send(self, status, body=b"", headers=()):
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self):
        """(status, body, headers) of this request."""
        path = urllib.parse.urlparse(self.path).path
        self.server.requests.append(f"{self.command} {path}")
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            repo, kind = "/".join(parts[2:4]), parts[4]
            if repo not in self.server.repos:
                return 404, b'{"error": "Repository not found"}', [("X-Error-Code",
                                                                      "RepoNotFound")]
            if kind == "revision":
                files = sorted(os.listdir(self.server.repos[repo]))
                return 200, json.dumps({"id": repo, "sha": COMMIT, "siblings": [
                    {"rfilename": name} for name in files]}).encode(), []
            if kind == "tree":
                folder = self.server.repos[repo]
                return 200, json.dumps([
                    {"type": "file", "path": name, "oid": _oid(os.path.join(folder, name)),
                     "size": os.path.getsize(os.path.join(folder, name))}
                    for name in sorted(os.listdir(folder))]).encode(), []
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            path = self._file(repo, name)
            if path is None:
                return 404, b"", [("X-Error-Code", "EntryNotFound")]
            with open(path, "rb") as f:
                body = f.read()
            return 200, body, [("X-Repo-Commit", COMMIT), ("ETag", f'"{_oid(path)}"')]
        return 404, b"", []

    def do_GET(self):
        self._send(*self._route())

    def do_HEAD(self):
        self._send(*self._route())


def _oid(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


@contextlib.contextmanager
def hub_server(repos):
    """Serves {repo id: folder} on 127.0.0.1; yields the server (`.endpoint`, `.requests`)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    httpd.daemon_threads = True
    httpd.repos, httpd.requests = {k: str(v) for k, v in repos.items()}, []
    httpd.endpoint = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def use_hub(monkeypatch, endpoint, cache_dir):
    """Points huggingface_hub at `endpoint` with an empty cache at `cache_dir`, for this test:
    the endpoint is read from HF_ENDPOINT when huggingface_hub is imported, into these two."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache_dir))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
