// A minimal OpenAI-shaped upstream for the gateway benchmarks (scaleout_overhead.mjs,
// scaleout_gateway_cpu.mjs), in its own node process (so the load generator's event loop is not
// its): a fixed 1-token completion answered at once, and for stream requests an SSE stream
// whose first event is sent at once and the rest `gapMs` later; /ready, /health and a /metrics
// with the replica gauges the gateway's poller reads. The engine's own variance removed: what a
// client sees through the gateway beyond this is the gateway.
import { spawn } from 'node:child_process';

const source = (gapMs) => `
const http = require('node:http');
const one = JSON.stringify({ id: 'cmpl-static', object: 'text_completion', model: 'synth',
  choices: [{ index: 0, text: ' a', finish_reason: 'length' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
const ev = (o) => 'data: ' + JSON.stringify(o) + '\\n\\n';
const s = http.createServer((req, res) => {
  if (req.url === '/ready' || req.url === '/health') { res.writeHead(200, { 'content-type': 'application/json' }); return res.end('{"status":"ready"}'); }
  if (req.url === '/metrics') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    return res.end('tokenserve:num_requests_waiting 0\\ntokenserve:num_requests_running 0\\ntokenserve:kv_cache_usage_perc 0\\n');
  }
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    const stream = JSON.parse(body || '{}').stream;
    // With a Content-Length, as a replica answers (node would otherwise send it chunked, and the
    // gateway relays a chunked answer as a stream: another code path than a replica's JSON takes).
    if (!stream) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(one), 'x-tokenserve-served-by': 'static' });
      return res.end(one);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-tokenserve-served-by': 'static' });
    res.write(ev({ id: 'cmpl-static', object: 'text_completion', choices: [{ index: 0, text: ' a', finish_reason: null }] }));
    setTimeout(() => { res.write(ev({ id: 'cmpl-static', object: 'text_completion', choices: [{ index: 0, text: '', finish_reason: 'length' }] })); res.end('data: [DONE]\\n\\n'); }, ${gapMs});
  });
});
s.keepAliveTimeout = 60000;
s.listen(Number(process.argv[1]), '127.0.0.1', () => console.log('listening on http://127.0.0.1:' + process.argv[1]));
`;

// Starts it on a free port; `kids` collects the process (the caller kills it on exit).
export async function startStatic(H, kids, gapMs = 30) {
  const port = await H.freePort();
  const p = spawn(process.execPath, ['-e', source(gapMs), String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  kids.push(p);
  await new Promise((resolve) => p.stdout.once('data', resolve));
  return { name: 'static', port, url: `http://127.0.0.1:${port}`, proc: p, stop: async () => p.kill('SIGKILL') };
}
