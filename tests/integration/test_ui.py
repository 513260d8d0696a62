"""GET /ui (src/api/ui.c; docs/sizing.md "The page"): the sizing curves drawn by the
server, loaded in a real browser (Debian's headless Chromium, the package
chromium-headless-shell: Chromium's engine without its windowing, a third less to
install than chromium and half its CPU here): the page holds the curve's SVG path
with its 21 points, the screenshot is not blank, and the page refuses a caller
without credentials where auth is on. One browser run, about 2.5 s of CPU. Set
HF3FS_UI_SHOT=FILE to keep the screenshot for a look.
"""
import http.client
import http.server
import os
import random
import shutil
import struct
import subprocess
import tempfile
import threading
import zlib

import harness
from harness import LoggedServer, TokenFile, expect_eq, expect_status, expect_true
from test_auth import bearer

CHROMIUM = shutil.which("chromium-headless-shell")
OPERATOR, TENANT = "tok-operator-ui-5e1d", "tok-acme-ui-0b7f"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def feed(c, headers):
    """A skewed prefix workload on one rank of 512 pages: 300 documents of 16 blocks,
    a request reads a document's chain (batch_exists) and saves what it misses."""
    expect_status(c.post("/rank/0/initialize", {"role": "worker", "num_pages": 512},
                         headers=headers), 200)
    rng = random.Random(44)
    for _ in range(700):
        doc = min(int(rng.paretovariate(0.6)), 300)
        chain = ["%032x" % (doc * 1000 + i + 1) for i in range(16)]
        r = c.post("/keys/batch_exists", {"keys": chain}, headers=headers)
        expect_status(r, 200)
        missing = [k for k, e in zip(chain, r.json()["exists"]) if not e]
        if not missing:
            continue
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": missing}, headers=headers)
        expect_status(r, 200)
        done = [[k, p] for k, p in r.json()["results"] if p >= 0]
        expect_status(c.post("/keys/confirm_write", {"rank": 0, "confirmations": done},
                             headers=headers), 204)


class Proxy:
    """What an operator's authenticating proxy does: forwards GETs to the server's
    port with the operator's Authorization header (headless Chromium sends no
    credentials of its own)."""

    def __init__(self, port, token):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
                conn.request("GET", self.path, headers={"Authorization": "Bearer " + token})
                r = conn.getresponse()
                body = r.read()
                self.send_response(r.status)
                self.send_header("Content-Type", r.getheader("Content-Type") or "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                conn.close()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        return False


def chromium(url, *args):
    """Run headless Chromium on url with a fresh profile; its stdout."""
    profile = tempfile.mkdtemp(prefix="hf3fs-metad-chromium-")
    try:
        r = subprocess.run([CHROMIUM] + FLAGS + ["--user-data-dir=" + profile] + list(args) +
                           [url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        expect_eq(r.returncode, 0, "chromium's exit (stderr %r)" % r.stderr[-2000:])
        return r.stdout.decode("utf-8", "replace")
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, unfiltered."""
    data = open(path, "rb").read()
    expect_eq(data[:8], b"\x89PNG\r\n\x1a\n", "a PNG signature")
    pos, idat, width = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            expect_true(depth == 8 and color in (2, 6), "8-bit RGB(A): %d %d" % (depth, color))
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    raw = zlib.decompress(b"".join(idat))
    stride, rows, prev = width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def test_ui_draws_each_namespaces_curve_in_a_browser_and_refuses_without_credentials():
    if not CHROMIUM:
        raise AssertionError("chromium-headless-shell is not installed (make deps installs "
                             "TEST_DEPS)")
    auth = bearer(OPERATOR)
    with TokenFile("%s acme\n%s *\n" % (TENANT, OPERATOR)) as tokens, \
            LoggedServer("--auth-token-file", tokens) as s:
        c = s.client()
        expect_status(c.get("/ui"), 401)
        feed(c, bearer(TENANT))
        r = c.get("/ui", headers=auth)
        expect_status(r, 200)
        expect_true(r.header("content-type").startswith("text/html"), "an HTML page")
        page = r.body.decode()
        expect_true("<script" not in page and "http://" not in page and "https://" not in page,
                    "no script, no external asset")
        advice = [n for n in c.get("/v1/stats", headers=auth).json()["namespaces"]
                  if n["namespace"] == "kv"][0]["advice"]
        expect_status(c.get("/ui", headers=bearer("not-a-token")), 401)
        with Proxy(s.port, OPERATOR) as proxy:
            shot = os.environ.get("HF3FS_UI_SHOT") or os.path.join(s.workdir, "ui.png")
            dom = chromium("http://127.0.0.1:%d/ui" % proxy.port, "--dump-dom",
                           "--screenshot=" + shot, "--window-size=1280,800")
        start = dom.find('class="estimate"')
        expect_true(start >= 0, "the curve's path is in the browser's DOM")
        d = dom[dom.index(' d="', start) + 4:]
        d = d[:d.index('"')]
        points = [tuple(float(v) for v in p.split(",")) for p in d[1:].replace("L", " ").split()]
        expect_eq(len(points), 21, "21 points, 1/8x to 4x")
        ys = [y for _, y in points]
        expect_true(ys[0] > ys[-1], "the curve climbs with the pages: %r" % ys)
        expect_true(">now<" in dom and ">advised<" in dom, "today's and the advised size")
        expect_true(">%d<" % advice["pages"] in dom, "the advised pages: %d" % advice["pages"])
        width, height, bpp, rows = png_pixels(shot)
        expect_eq((width, height), (1280, 800), "the window's size")
        colors = set()
        for row in rows[::8]:
            for x in range(0, width * bpp, bpp * 4):
                colors.add(row[x:x + 3])
        expect_true(len(colors) >= 8, "a drawn page, not a blank one: %d colors" % len(colors))
        blue = sum(1 for row in rows for x in range(0, width * bpp, bpp)
                   if row[x + 2] > 150 and row[x] < 80 and row[x + 1] < 130)
        expect_true(blue > 200, "the curve's blue is on screen: %d pixels" % blue)


if __name__ == "__main__":
    harness.main(globals())
