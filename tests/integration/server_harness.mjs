// Starts a real `tokenserve serve` on 127.0.0.1 with a free port and stops it afterwards.
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '../..');
export const shared = process.env.TOKENSERVE_SHARED || path.resolve(root, '../shared');
export const bin = process.env.TOKENSERVE_BIN || path.join(root, 'build/tokenserve');
export const storiesModel = path.join(shared, 'models/stories260K/stories260K-f32.gguf');
export const haveShared = fs.existsSync(storiesModel);

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

// The server picks its own port (--port 0) and the harness reads it from the server's first
// log line ("listening on http://127.0.0.1:PORT"): the harness never connects to a port before
// the server holds it. (Polling a port nobody holds yet can end in a TCP self-connect — the
// client's ephemeral source port equals the destination — and a probe that hangs forever.)
export const listeningPort = (log) => {
  const m = /listening on http:\/\/[^\s:]+:(\d+)/.exec(log) || /serving model '[^']*' on http:\/\/[^\s:]+:(\d+)/.exec(log);
  return m ? Number(m[1]) : null;
};

export async function startServer(extraArgs = [], { model = storiesModel } = {}) {
  const fixedPort = extraArgs.includes('--port');
  const args = ['serve', '-m', model, '--host', '127.0.0.1', ...(fixedPort ? [] : ['--port', '0']), ...extraArgs];
  let tmpDir = null;
  if (!extraArgs.includes('--ledger')) {  // keep test ledgers out of the working directory
    tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ts-harness-'));
    args.push('--ledger', path.join(tmpDir, 'ledger.db'));
  }
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + 30000;
  let port = fixedPort ? Number(extraArgs[extraArgs.indexOf('--port') + 1]) : null;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`server exited early (${proc.exitCode}):\n${log}`);
    if (port === null) port = listeningPort(log);
    if (port !== null) {
      try {
        const r = await fetch(`http://127.0.0.1:${port}/ready`, { signal: AbortSignal.timeout(5000) });
        if (r.ok) break;
      } catch { /* not up yet */ }
    }
    if (Date.now() > deadline) { proc.kill('SIGKILL'); throw new Error(`server did not become ready:\n${log}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = `http://127.0.0.1:${port}`;
  return {
    url, port, proc, exited,
    log: () => log,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
      const r = await exited;
      clearTimeout(t);
      if (tmpDir) fs.rmSync(tmpDir, { recursive: true, force: true });
      return r;
    },
  };
}
