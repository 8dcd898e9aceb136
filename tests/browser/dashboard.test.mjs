// Headless-Chromium test of the tokenserve dashboard (web/dashboard/index.html, embedded in the
// binary as /dashboard). It asserts the numbers the page renders, not only that it loads.
//
// Two modes:
//  - standalone (default): a Node http server serves the page with a fixed /dashboard/data
//    payload (fixture.mjs) and a matching /metrics; checks every rendered value, that the page
//    refreshes to a new payload, and that it marks itself stale when the endpoint fails.
//  - live server: TOKENSERVE_URL=http://127.0.0.1:8080 (optionally TOKENSERVE_API_KEY,
//    TOKENSERVE_METRICS_KEY for /metrics and the dashboard when API keys are on, and
//    TOKENSERVE_TRAFFIC=N requests to send, default 4; 0 = send none). Sends known traffic to
//    /v1/completions, then checks the /metrics deltas against the usage bodies, and the rendered
//    page against both the payload it rendered and /metrics.
//
// Run: cd tests/browser && npm ci && npm test   (Chromium: Debian's /usr/bin/chromium, or
// CHROMIUM_PATH). DASHBOARD_SCREENSHOT=path saves a full-page screenshot.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { makePayload, metricsText } from "./fixture.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PAGE_PATH = path.join(HERE, "..", "..", "web", "dashboard", "index.html");
const LIVE_URL = process.env.TOKENSERVE_URL ? process.env.TOKENSERVE_URL.replace(/\/$/, "") : "";
const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const SCREENSHOT = process.env.DASHBOARD_SCREENSHOT || "";

async function launchBrowser() {
  const profile = await mkdtemp(path.join(tmpdir(), "ts-dashboard-profile-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return { context, profile };
}

// --- expected rendering, computed independently of the page's code ---------------------------
function get(obj, keys) {
  for (const k of keys) {
    if (obj == null) return null;
    obj = obj[k];
  }
  return obj === undefined ? null : obj;
}

function unitOf(metric) {
  if (/_ms\./.test(metric)) return "ms";
  if (metric.endsWith("output_tokens_per_s")) return "tok/s";
  if (metric.endsWith("kv_cache_usage") || metric.endsWith("prefix_hit_rate") || metric.endsWith("acceptance_rate")) return "%";
  return "";
}

function expectedText(v, unit) {
  if (v === null) return "–";
  if (unit === "%") return (v * 100).toFixed(1);
  if (unit === "ms" || unit === "tok/s") return v >= 100 ? v.toFixed(0) : v.toFixed(1);
  return Number.isInteger(v) ? v.toLocaleString("en-US") : v.toFixed(2);
}

async function renderedCards(page) {
  return page.$$eval("[data-metric]", (els) =>
    els.map((e) => ({ id: e.id, metric: e.dataset.metric, value: e.dataset.value, text: e.textContent })));
}

// Every value card shows exactly the payload's number; the usage table has its rows.
async function assertRenders(page, payload) {
  const cards = await renderedCards(page);
  assert.ok(cards.length >= 25, `expected the value cards, found ${cards.length}`);
  for (const c of cards) {
    const want = get(payload, c.metric.split("."));
    assert.equal(c.value, want === null ? "" : String(want), `${c.id} data-value`);
    assert.equal(c.text, expectedText(want, unitOf(c.metric)), `${c.id} text`);
  }
  const rows = await page.$$eval("#usage tbody tr", (trs) => trs.map((tr) => ({
    tenant: tr.dataset.tenant, app: tr.dataset.app,
    cells: Object.fromEntries([...tr.children].map((td) => [td.dataset.field, td.dataset.value])) })));
  assert.equal(rows.length, payload.usage.length, "usage rows");
  payload.usage.forEach((u, i) => {
    assert.equal(rows[i].tenant, u.tenant);
    assert.equal(rows[i].app, u.app);
    for (const f of ["requests", "prompt_tokens", "completion_tokens", "total_tokens"]) {
      assert.equal(rows[i].cells[f], String(u[f]), `usage row ${i} ${f}`);
    }
  });
  assert.equal(await page.$eval("#model", (e) => e.dataset.value), payload.model);
  // Tenant legend follows the payload's series.
  const tenants = await page.$$eval("#lg-tenant [data-series]", (els) => els.map((e) => e.dataset.series));
  assert.deepEqual(tenants, Object.keys(payload.series.tokens_by_tenant));
}

// Every chart has drawn lines (not just an empty frame).
async function assertChartsDrawn(page, minPixels) {
  const counts = await page.$$eval("canvas", (cs) => cs.map((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let colored = 0;
    for (let i = 0; i < d.length; i += 4) {
      // Series colors are bright; grid lines and labels are grey/dim.
      const max = Math.max(d[i], d[i + 1], d[i + 2]), min = Math.min(d[i], d[i + 1], d[i + 2]);
      if (d[i + 3] > 0 && max - min > 60) colored++;
    }
    return { id: c.id, colored };
  }));
  assert.equal(counts.length, 7);
  for (const c of counts) assert.ok(c.colored >= minPixels, `${c.id} drew ${c.colored} colored pixels`);
}

// --- /metrics -----------------------------------------------------------------------------------
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `bad exposition line: ${line}`);
    const labels = {};
    for (const l of (m[2] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  const sum = (name, match = {}) => samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
  const max = (name) => Math.max(0, ...samples.filter((s) => s.name === name).map((s) => s.value));
  return { samples, sum, max };
}

// The rendered totals and gauges equal what /metrics reports.
async function assertMatchesMetrics(page, metrics) {
  const v = async (id) => Number(await page.$eval(`#v-${id}`, (e) => e.dataset.value));
  const P = "tokenserve:";
  assert.equal(await v("total-requests"), metrics.sum(P + "request_success_total"));
  assert.equal(await v("total-prompt-tokens"), metrics.sum(P + "prompt_tokens_total"));
  assert.equal(await v("total-generation-tokens"), metrics.sum(P + "generation_tokens_total"));
  assert.equal(await v("total-errors"), metrics.sum(P + "request_errors_total"));
  assert.equal(await v("total-rate-limited"), metrics.sum(P + "rate_limited_total"));
  assert.equal(await v("total-quota-rejected"), metrics.sum(P + "quota_rejected_total"));
  assert.equal(await v("total-preemptions"), metrics.sum(P + "num_preemptions_total"));
  assert.equal(await v("total-prefix-hits"), metrics.sum(P + "prefix_cache_hits_total"));
  assert.equal(await v("ledger-spool-depth"), metrics.sum(P + "ledger_spool_depth"));
  for (const tier of ["interactive", "batch"]) {
    assert.equal(await v(`running-${tier}`), metrics.sum(P + "num_requests_running", { tier }));
    assert.equal(await v(`waiting-${tier}`), metrics.sum(P + "num_requests_waiting", { tier }));
  }
  assert.equal(await v("kv-usage"), metrics.max(P + "kv_cache_usage_perc"));
}

async function waitForPayload(page, generatedAt) {
  await page.waitForFunction((g) => window.__dashboard && window.__dashboard.last &&
    (g === undefined || window.__dashboard.last.generated_at_ms === g), generatedAt, { timeout: 15000 });
}

// --- standalone ---------------------------------------------------------------------------------
describe("dashboard with a fixture server", { skip: LIVE_URL ? "TOKENSERVE_URL set: live mode" : false }, () => {
  let server, base, browser, payload = makePayload(1), failing = false;

  before(async () => {
    const html = await readFile(PAGE_PATH, "utf8");
    server = http.createServer((req, res) => {
      const url = new URL(req.url, "http://x");
      if (url.pathname === "/dashboard") {
        res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(html);
      } else if (url.pathname === "/dashboard/data") {
        if (failing) return res.writeHead(503).end("{}");
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(payload));
      } else if (url.pathname === "/metrics") {
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(metricsText(payload));
      } else {
        res.writeHead(404).end();
      }
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${server.address().port}`;
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.context.close();
    if (browser) await rm(browser.profile, { recursive: true, force: true });
    server?.close();
  });

  test("renders the payload's values, refreshes, and marks stale data", async () => {
    const page = await browser.context.newPage();
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    await page.goto(`${base}/dashboard?interval=500`);
    await waitForPayload(page, payload.generated_at_ms);

    await assertRenders(page, payload);
    // Spot checks against literal numbers, so a formatting bug shared with the test is caught.
    assert.equal(await page.textContent("#v-ttft-p50-interactive"), "188");
    assert.equal(await page.textContent("#v-ttft-p95-batch"), "2302");
    assert.equal(await page.textContent("#v-tpot-p50-interactive"), "24.8");
    assert.equal(await page.textContent("#v-tpot-p50-batch"), "–");
    assert.equal(await page.textContent("#v-kv-usage"), "81.3");
    assert.equal(await page.textContent("#v-prefix-hit-rate"), "43.8");
    assert.equal(await page.textContent("#v-total-generation-tokens"), "987,754");
    assert.equal(await page.textContent("#v-waiting-batch"), "17");
    assert.equal(await page.$eval("#status", (e) => e.dataset.state), "live");
    await assertMatchesMetrics(page, parseMetrics(metricsText(payload)));
    await assertChartsDrawn(page, 40);
    if (SCREENSHOT) await page.screenshot({ path: SCREENSHOT, fullPage: true });

    // The page polls: a new payload shows up without a reload.
    payload = makePayload(2);
    await waitForPayload(page, payload.generated_at_ms);
    await assertRenders(page, payload);
    assert.equal(await page.textContent("#v-ttft-p50-interactive"), "189");

    // A failing endpoint marks the page stale and keeps the last values.
    failing = true;
    await page.waitForFunction(() => document.getElementById("status").dataset.state === "stale",
      null, { timeout: 10000 });
    await assertRenders(page, payload);
    assert.deepEqual(pageErrors, []);
    await page.close();
  });
});

// --- live server --------------------------------------------------------------------------------
describe("dashboard against a live tokenserve", { skip: LIVE_URL ? false : "set TOKENSERVE_URL" }, () => {
  const headers = { "content-type": "application/json" };
  if (process.env.TOKENSERVE_API_KEY) headers.authorization = `Bearer ${process.env.TOKENSERVE_API_KEY}`;
  const traffic = Number(process.env.TOKENSERVE_TRAFFIC ?? 4);
  let browser;

  before(async () => { browser = await launchBrowser(); });
  after(async () => {
    await browser?.context.close();
    if (browser) await rm(browser.profile, { recursive: true, force: true });
  });

  // With API keys on, /metrics and /dashboard* need the metrics (or admin) key.
  const obsHeaders = process.env.TOKENSERVE_METRICS_KEY
    ? { authorization: `Bearer ${process.env.TOKENSERVE_METRICS_KEY}` } : {};
  const scrape = async () => parseMetrics(await (await fetch(`${LIVE_URL}/metrics`, { headers: obsHeaders })).text());

  test("known traffic shows up in /metrics and on the rendered page", async () => {
    const P = "tokenserve:";
    const before = await scrape();
    let prompt = 0, completion = 0;
    if (traffic > 0) {
      const models = await (await fetch(`${LIVE_URL}/v1/models`, { headers })).json();
      const model = models.data[0].id;
      for (let i = 0; i < traffic; i++) {
        const r = await fetch(`${LIVE_URL}/v1/completions`, {
          method: "POST", headers,
          body: JSON.stringify({ model, prompt: `Once upon a time ${i}`, max_tokens: 8, temperature: 0 }),
        });
        assert.equal(r.status, 200, await r.clone().text());
        assert.ok(r.headers.get("x-request-id"), "x-request-id header");
        const body = await r.json();
        prompt += body.usage.prompt_tokens;
        completion += body.usage.completion_tokens;
      }
    }
    const afterTraffic = await scrape();
    assert.equal(afterTraffic.sum(P + "request_success_total") - before.sum(P + "request_success_total"), traffic);
    assert.equal(afterTraffic.sum(P + "prompt_tokens_total") - before.sum(P + "prompt_tokens_total"), prompt);
    assert.equal(afterTraffic.sum(P + "generation_tokens_total") - before.sum(P + "generation_tokens_total"), completion);
    assert.equal(afterTraffic.sum(P + "time_to_first_token_seconds_count") -
      before.sum(P + "time_to_first_token_seconds_count"), completion > 0 ? traffic : 0);

    const page = await browser.context.newPage();
    await page.setExtraHTTPHeaders(obsHeaders);  // the page and its /dashboard/data fetches
    await page.goto(`${LIVE_URL}/dashboard?interval=1000`);
    await waitForPayload(page);
    const rendered = await page.evaluate(() => window.__dashboard.last);
    await assertRenders(page, rendered);
    await assertMatchesMetrics(page, await scrape());
    assert.ok(rendered.totals.generation_tokens >= completion);
    if (traffic > 0) {
      const ttft = await page.$eval("#v-ttft-p50-interactive", (e) => e.dataset.value);
      assert.ok(Number(ttft) > 0, `interactive TTFT P50 rendered: '${ttft}'`);
      const usageTotal = rendered.usage.reduce((a, u) => a + u.total_tokens, 0);
      assert.ok(usageTotal >= prompt + completion, "usage table covers the traffic");
    }
    await assertChartsDrawn(page, traffic > 0 ? 1 : 0);
    if (SCREENSHOT) await page.screenshot({ path: SCREENSHOT, fullPage: true });
    await page.close();
  });
});
