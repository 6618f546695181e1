// A `frugal serve` child process for the bench scripts (load_test.mjs, soak.mjs): started on a free
// loopback port, with its resident memory readable and a clean stop.
import { spawn } from 'node:child_process';
import fs from 'node:fs';

// args: the arguments after `serve` (without --port); resolves once the server says it listens.
export async function startServe(bin, args, startTimeoutMs = 300000) {
  const proc = spawn(bin, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const port = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start:\n${stderr}`)), startTimeoutMs);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (c) => reject(new Error(`server exited (${c}):\n${stderr}`)));
  });
  return {
    proc,
    url: `http://127.0.0.1:${port}`,
    stderr: () => stderr,
    // VmRSS of the server process in bytes (0 once it has gone).
    rssBytes() {
      try {
        const m = fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
        return m ? Number(m[1]) * 1024 : 0;
      } catch {
        return 0;
      }
    },
    async stop() {
      if (proc.exitCode !== null) return;
      const done = new Promise((r) => proc.on('exit', r));
      proc.kill('SIGTERM');
      await done;
    },
  };
}
