// tests/e2e/daemon.mjs - what every SDK test needs around the real daemon:
// start `graphserve serve` on an ephemeral port, stop it, and write a model
// copy that carries a chat template.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

// Starts `BIN serve --port 0 ARGS...`; resolves with {proc, url, log} once it
// prints its listening line (http:// or, with --tls-cert, https://), rejects if it exits first.
export function startDaemon(bin, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(bin, ['serve', '--port', '0', ...args],
                       { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', log = '';
    proc.stderr.on('data', (d) => { log += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (https?:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve({ proc, url: m[1], log: () => log });
    });
    proc.on('exit', (code) => reject(new Error(`daemon exited ${code} before listening:\n${log}`)));
  });
}

// SIGTERM; resolves with {code, signal} once it has exited 0 without a sanitizer
// report in its log (a leak found by LeakSanitizer at exit is one), and rejects
// otherwise, with the log: every test that stops a daemon checks both this way.
export function stopDaemon(d) {
  return new Promise((resolve, reject) => {
    d.proc.removeAllListeners('exit');
    d.proc.on('exit', (code, signal) => {
      if (code !== 0)
        reject(new Error(`daemon exit status ${code} (signal ${signal}); log:\n${d.log()}`));
      else if (/Sanitizer|runtime error:/.test(d.log()))
        reject(new Error(`sanitizer report in the daemon's log:\n${d.log()}`));
      else
        resolve({ code, signal });
    });
    d.proc.kill('SIGTERM');
  });
}

// A copy of the GGUF at src with tokenizer.chat_template = tmpl, written after the
// header with a padding key that keeps the data section aligned (as
// tests/server/test_http_jinja.c does).
export function withTemplate(src, tmpl, out) {
  const d = readFileSync(src);
  const align = 32; // the arch files' general.alignment (the default)
  const key = Buffer.from('tokenizer.chat_template'), t = Buffer.from(tmpl, 'utf8');
  const padPrefix = 'graphserve.test.pad';
  const kv = 8 + key.length + 4 + 8 + t.length, base = 8 + 4 + 4;
  let pk = padPrefix.length;
  while ((kv + base + pk) % align) pk++;
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
  const nKv = d.readBigUInt64LE(16);
  const pad = Buffer.from(padPrefix + 'x'.repeat(pk - padPrefix.length));
  writeFileSync(out, Buffer.concat([
    d.subarray(0, 16), u64(nKv + 2n),
    u64(key.length), key, u32(8), u64(t.length), t,
    u64(pad.length), pad, u32(4), u32(0),
    d.subarray(24),
  ]));
  return out;
}
