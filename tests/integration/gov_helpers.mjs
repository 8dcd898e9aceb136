// Helpers for the governance / observability end-to-end tests: temp dirs, the `tokenserve keys`
// and `tokenserve usage` CLIs, HTTP calls that keep status + headers + body, Prometheus parsing.
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bin } from './server_harness.mjs';

export const model = 'stories260K-f32';
export const prompt = 'Once upon a time';   // 5 prompt tokens with stories260K
export const promptTokens = 5;

export function tempDir(tag) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `ts-${tag}-`));
}

export function sha256(s) {
  return crypto.createHash('sha256').update(s).digest('hex');
}

export function uniq(prefix) {
  return `${prefix}${crypto.randomBytes(4).toString('hex')}`;
}

// `tokenserve keys create ...`: returns { key, id }.
export function createKey(ledger, { tenant, app = 'app', rpm, tpm, models, tiers, expires } = {}) {
  const args = ['keys', 'create', '--tenant', tenant, '--app', app, '--ledger', ledger];
  if (rpm) args.push('--rpm', String(rpm));
  if (tpm) args.push('--tpm', String(tpm));
  if (models) args.push('--models', models);
  if (tiers) args.push('--tiers', tiers);
  if (expires) args.push('--expires', expires);
  const out = execFileSync(bin, args, { encoding: 'utf8' });
  const lines = out.trim().split('\n');
  const id = (out.match(/^id:\s+(\S+)/m) || [])[1];
  return { key: lines[lines.length - 1].trim(), id };
}

// `tokenserve usage --format json`: the parsed report.
export function usageReport(ledger, { by = 'tenant', tenant } = {}) {
  const args = ['usage', '--by', by, '--format', 'json', '--ledger', ledger];
  if (tenant) args.push('--tenant', tenant);
  return JSON.parse(execFileSync(bin, args, { encoding: 'utf8' }));
}

// Polls until fn() returns a truthy value (ledger writes are asynchronous).
export async function eventually(fn, { timeoutMs = 10000, stepMs = 100 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) return last;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export async function call(url, pathname, { method = 'POST', body, key, headers = {}, signal } = {}) {
  const h = { ...headers };
  if (body !== undefined) h['content-type'] = 'application/json';
  if (key) h.authorization = `Bearer ${key}`;
  const r = await fetch(url + pathname, {
    method, headers: h, body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)), signal,
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* SSE or text */ }
  return { status: r.status, headers: r.headers, text, json };
}

export function completion(url, key, extra = {}, opts = {}) {
  return call(url, '/v1/completions', {
    key, body: { model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true, ...extra }, ...opts,
  });
}

// Usage of an SSE body with include_usage (the last chunk carrying usage).
export function sseUsage(text) {
  let usage = null;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const j = JSON.parse(line.slice(6));
    if (j.usage) usage = j.usage;
  }
  return usage;
}

// Prometheus text -> [{ name, labels, value }].
export function parseProm(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// Sum of a metric's samples whose labels include `match`.
export function metricSum(samples, name, match = {}) {
  return samples.filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}
