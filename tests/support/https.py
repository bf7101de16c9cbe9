"""A static HTTPS file server on 127.0.0.1 for the tests of `https://` input: GET and
HEAD of a directory's files, with `Range`, an `ETag` per file (its content's digest) and
`If-Match`, as the static servers that publish data (nginx, RIPE's data store) answer.
Its certificate comes from a throwaway CA (`trustme`), which the job trusts through
`SSL_CERT_FILE`."""

from __future__ import annotations

import hashlib
import re
import ssl
import threading
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trustme


class _Files(BaseHTTPRequestHandler):
    def __init__(self, *args, root: Path, etags: bool, **kw):
        self.root, self.etags = root, etags
        super().__init__(*args, **kw)

    def log_message(self, *args):  # quiet: pytest shows the test's own output
        pass

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body: bool):
        path = (self.root / self.path.lstrip("/")).resolve()
        if self.root not in path.parents or not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        etag = f'"{hashlib.sha256(data).hexdigest()[:32]}"'
        if_match = self.headers.get("If-Match")
        if self.etags and if_match is not None and if_match not in ("*", etag):
            self.send_error(412)
            return
        start, end, status = 0, len(data), 200
        wanted = self.headers.get("Range")
        if wanted:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
            if not m or (not m[1] and not m[2]):
                self.send_error(416)
                return
            if m[1]:
                start, end = int(m[1]), min(int(m[2]) + 1 if m[2] else len(data), len(data))
            else:
                start = max(len(data) - int(m[2]), 0)
            if start >= len(data):
                self.send_error(416)
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Last-Modified", self.date_time_string(int(path.stat().st_mtime)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        if self.etags:
            self.send_header("ETag", etag)
        self.end_headers()
        if body:
            self.wfile.write(data[start:end])


@contextmanager
def https_server(root: Path, tmp: Path, etags: bool = True):
    """Serves `root` over HTTPS; yields (base URL, environment that trusts it)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    bundle = tmp / "test-ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Files, root=root.resolve(), etags=etags))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", {"SSL_CERT_FILE": str(bundle)}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
