/*
 * ui.c: GET /ui, the sizing figures of /v1/stats as one page for a person
 * (docs/sizing.md, "The page"): per namespace, the estimated prefix-hit
 * ratio against the pool size (reuse.h, 1/8 to 4 times the pages, on a log
 * axis) with the pages now and the advised pages marked, the target, the
 * measured ratio, and each rank's pool: pages, fill (owned pages) and the
 * share of keys found by allocate, exists and lookup. HTML with inline SVG drawn here: no script, no
 * external asset. Same routes' auth as /v1/stats: the caller's tenant's
 * namespaces (every tenant's for the operator).
 */
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/metrics.h"

/* The plot, in SVG user units. */
#define W 560
#define H 260
#define L 56 /* left margin: the ratio axis */
#define R 16
#define T 14
#define B 40 /* bottom margin: the pages axis */

static void put_text(json_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '<')
            json_put_lit(out, "&lt;");
        else if (c == '>')
            json_put_lit(out, "&gt;");
        else if (c == '&')
            json_put_lit(out, "&amp;");
        else if (c == '"')
            json_put_lit(out, "&quot;");
        else
            json_put_char(out, c);
    }
}

static void putf(json_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(json_buf *out, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        json_put_raw(out, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* x of a scale (log2 from -3 to 2), y of a ratio in millionths (0 to ymax). */
static double x_of(double log2_scale)
{
    return L + (log2_scale + 3.0) / 5.0 * (W - L - R);
}

static double y_of(double ppm, double ymax)
{
    return T + (1.0 - ppm / ymax) * (H - T - B);
}

static double log2_of(double v)
{
    double l = 0;
    while (v >= 2) {
        v /= 2;
        l++;
    }
    while (v < 1) {
        v *= 2;
        l--;
    }
    /* log2 on [1, 2): a short series is enough for drawing */
    double t = (v - 1) / (v + 1), t2 = t * t;
    return l + 2.0 * t * (1 + t2 / 3 + t2 * t2 / 5 + t2 * t2 * t2 / 7) / 0.6931471805599453;
}

static void put_marker(json_buf *out, double x, const char *color, const char *label, int row)
{
    putf(out,
         "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" "
         "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%d\" fill=\"%s\" font-size=\"13\" "
         "text-anchor=\"%s\">%s</text>",
         x, T, x, H - B, color, x + (x > W / 2.0 ? -4 : 4), H - B - 8 - 16 * row, color,
         x > W / 2.0 ? "end" : "start", label);
}

static void put_curve(json_buf *out, const api__pool_figures *p, const reuse_advice *a)
{
    const core_pool_stats *s = &p->stats;
    double ppm[REUSE_SCALES], ymax = 100000;
    for (int j = 0; j < REUSE_SCALES; j++) {
        ppm[j] = (double)s->est_hits[j] * 1e6 / (double)s->est_blocks; /* 0 if not known */
        if (ppm[j] > ymax)
            ymax = ppm[j];
    }
    ymax = ymax >= 1e6 ? 1e6 : (double)((uint64_t)(ymax / 100000) + 1) * 100000;
    double step = ymax > 600000 ? 200000 : 100000; /* ticks at 0.1 or 0.2 */
    putf(out,
         "<svg class=\"curve\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
         "aria-label=\"estimated prefix-hit ratio against pages per rank\">",
         W, H, W, H);
    putf(out,
         "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
         "stroke=\"#999\"/>",
         L, T, W - L - R, H - T - B);
    for (int i = 0; i * step <= ymax + 1; i++) { /* the ratio axis */
        double v = i * step, y = y_of(v, ymax);
        putf(out,
             "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
             "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">%.1f</text>",
             L, y, W - R, y, L - 6, y + 4, v / 1e6);
    }
    for (int k = -3; k <= 2; k++) { /* the pages axis: 1/8 to 4 times the pages now */
        double x = x_of(k), pages = (double)s->num_pages * reuse_scales[REUSE_SCALE_ONE + 4 * k];
        putf(out,
             "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
             "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">%.0f</text>",
             x, T, x, H - B, x, H - B + 16, pages);
    }
    putf(out,
         "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">pages per rank "
         "(log scale)</text>",
         (L + W - R) / 2, H - 6);
    json_put_lit(out, "<path class=\"estimate\" fill=\"none\" stroke=\"#1f5fbf\" "
                      "stroke-width=\"2.5\" d=\"");
    for (int j = 0, k = 0; j < REUSE_SCALES; j++)
        if (reuse_scale_in(s->est_coarse, j))
            putf(out, "%c%.1f,%.1f", k++ ? 'L' : 'M', x_of((j - REUSE_SCALE_ONE) / 4.0),
                 y_of(ppm[j], ymax));
    json_put_lit(out, "\"/>");
    put_marker(out, x_of(0), "#333", "now", 0);
    if (a->reached && a->pages > 0) {
        double x = x_of(log2_of((double)a->pages / (double)s->num_pages));
        put_marker(out, x, "#c0392b", "advised", 1);
    }
    double ty = y_of((double)a->target_ppm, ymax);
    putf(out,
         "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c0392b\" "
         "stroke-dasharray=\"2 3\"/>",
         L, ty, W - R, ty);
    if (s->prefix_blocks) { /* the measured ratio, at the pages now */
        double m = (double)s->prefix_hits * 1e6 / (double)s->prefix_blocks;
        putf(out,
             "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#2e8b57\"><title>measured</title>"
             "</circle>",
             x_of(0), y_of(m > ymax ? ymax : m, ymax));
    }
    json_put_lit(out, "</svg>");
}

static void put_ratio(json_buf *out, int64_t ppm)
{
    putf(out, "%.3f", (double)(ppm < 0 ? 0 : ppm) / 1e6);
}

static void put_namespace(const api__req *req, json_buf *out, const api__pool_figures *p)
{
    const core_pool_stats *s = &p->stats;
    reuse_advice a;
    api__advice(req, p, &a);
    json_put_lit(out, "<section><h2>");
    put_text(out, p->ns.ptr, p->ns.len);
    json_put_lit(out, " <small>tenant ");
    put_text(out, p->tenant.ptr, p->tenant.len);
    json_put_lit(out, "</small></h2><div class=\"row\"><div>");
    if (a.known)
        put_curve(out, p, &a);
    else
        json_put_lit(out, "<p class=\"none\">No completeness read sampled yet: no curve.</p>");
    json_put_lit(out, "</div><table>");
    putf(out, "<tr><th>pages per rank now</th><td>%llu</td></tr>",
         (unsigned long long)s->num_pages);
    json_put_lit(out, "<tr><th>prefix-hit ratio measured</th><td>");
    if (s->prefix_blocks)
        put_ratio(out, (int64_t)(s->prefix_hits * 1000000 / s->prefix_blocks));
    else
        json_put_lit(out, "-");
    putf(out, "</td></tr><tr><th>requests, blocks read</th><td>%llu, %llu</td></tr>",
         (unsigned long long)s->prefix_requests, (unsigned long long)s->prefix_blocks);
    if (a.known) {
        json_put_lit(out, "<tr><th>estimate now</th><td>");
        put_ratio(out, a.ratio_ppm);
        json_put_lit(out, "</td></tr><tr><th>target</th><td>");
        put_ratio(out, a.target_ppm);
        putf(
            out,
            "</td></tr><tr><th>advised pages per rank</th><td class=\"advised\">%s%s%llu</td></tr>",
            a.coarse ? "~ " : "", a.reached ? "" : "&gt; ", (unsigned long long)a.pages);
        if (a.coarse)
            json_put_lit(out, "<tr><td colspan=\"2\" class=\"coarse\">Coarse: the curve has 5 "
                              "sizes, since a Redis node's module lacks the capability "
                              "fine-curve; the advice is only as fine as they are.</td></tr>");
        json_put_lit(out, "<tr><th>doubling gains</th><td>");
        put_ratio(out, a.double_ppm);
        putf(out, "</td></tr><tr><th>halving frees %llu pages, costs</th><td>",
             (unsigned long long)a.halve_frees);
        put_ratio(out, a.halve_ppm);
        putf(out, "</td></tr><tr><th>sampled block uses</th><td>%llu</td></tr>",
             (unsigned long long)s->est_blocks);
    }
    json_put_lit(out, "</table></div>");
}

/* Each rank's pool: pages, owned (the fill), hits and misses. */
static void put_pools(json_buf *out, const api__pool_figures *pools)
{
    json_put_lit(
        out, "<section><h2>Pools</h2><table class=\"pools\"><tr><th>namespace</th>"
             "<th>rank</th><th>pages</th><th>fill (owned)</th><th>keys found / asked</th></tr>");
    for (const api__pool_figures *p = pools; p; p = p->next) {
        const core_pool_stats *s = &p->stats;
        double fill = s->num_pages ? (double)s->owned / (double)s->num_pages : 0;
        uint64_t asked = s->hits + s->misses;
        json_put_lit(out, "<tr><td>");
        put_text(out, p->ns.ptr, p->ns.len);
        putf(out,
             "</td><td>%u</td><td>%llu</td><td><svg width=\"120\" height=\"12\"><rect "
             "width=\"120\" height=\"12\" fill=\"#eee\"/><rect class=\"fill\" width=\"%.1f\" "
             "height=\"12\" fill=\"#1f5fbf\"/></svg> %.1f%%</td><td>",
             (unsigned)p->rank, (unsigned long long)s->num_pages, 120 * fill, 100 * fill);
        if (asked)
            putf(out, "%.3f", (double)s->hits / (double)asked);
        else
            json_put_lit(out, "-");
        json_put_lit(out, "</td></tr>");
    }
    json_put_lit(out, "</table></section>");
}

void api__ui(api__req *req)
{
    api__pool_figures *pools;
    if (!api__collect_pools(req, &pools))
        return;
    json_buf *out = req->out;
    api__begin(req);
    req->resp->content_type = "text/html; charset=utf-8";
    json_put_lit(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width\">"
        "<title>hf3fs-metad: pool sizing</title><style>"
        "body{font:15px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222}"
        "h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:18px 0 6px}"
        "small{color:#666;font-weight:normal}.row{display:flex;gap:24px;align-items:flex-start;"
        "flex-wrap:wrap}table{border-collapse:collapse}th,td{padding:3px 10px;text-align:left;"
        "border-bottom:1px solid #e4e4e4}th{font-weight:600;color:#444}td{font-variant-numeric:"
        "tabular-nums}.advised{color:#c0392b;font-weight:700}.key span{margin-right:14px}"
        "</style></head><body><h1>Pool sizing</h1><p class=\"key\">Estimated prefix-hit ratio "
        "against pages per rank (docs/sizing.md): <span style=\"color:#1f5fbf\">&#9644; "
        "estimate</span><span>&#9482; now</span><span style=\"color:#c0392b\">&#9482; advised "
        "and target</span><span style=\"color:#2e8b57\">&#9679; measured</span></p>");
    size_t n = 0;
    for (const api__pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next)
        if (api__ns_first(prev, p)) {
            put_namespace(req, out, p);
            json_put_lit(out, "</section>");
            n++;
        }
    if (!n)
        json_put_lit(out, "<p>No pools.</p>");
    else
        put_pools(out, pools);
    json_put_lit(out, "</body></html>\n");
}
