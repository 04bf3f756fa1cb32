#!/usr/bin/env python3
"""Two training steps of a 2-layer Llama-style model, redone in float64 NumPy.

Runs tests/engine/train_step_dump.c (argv[1]) on a backend (argv[2]), reads
its tokens and initial weights, and computes from the definitions (not from
the engine's code) each step's loss, every parameter's gradient (by hand-
written reverse mode) and the AdamW update. Every tensor must agree with
the engine's within 1e-4 relative (norm-wise: |a - b| / |b|); the weights'
updates (after - before) are compared, not the weights, which would hide a
wrong update under the weights' size.
"""
import subprocess
import sys

import numpy as np

TOL = 1e-4


def parse(text):
    d = {"init": {}, "grad1": {}, "after1": {}, "grad2": {}, "after2": {}, "order": []}
    for line in text.splitlines():
        f = line.split()
        if f[0] == "shape":
            d["shape"] = [int(x) for x in f[1:]]
        elif f[0] == "opt":
            d["opt"] = [float(x) for x in f[1:]]
        elif f[0] == "tokens":
            d["tokens"] = np.array([int(x) for x in f[1:]])
        elif f[0].startswith("loss"):
            d[f[0]] = float(f[1])
        else:
            name, ne0, ne1 = f[1], int(f[2]), int(f[3])
            # a [ne0 x ne1] tensor is ne1 rows of ne0
            d[f[0]][name] = np.array([float(x) for x in f[4:]], dtype=np.float64).reshape(ne1, ne0)
            if f[0] == "init":
                d["order"].append(name)
    return d


def rms(x, eps):
    s = 1.0 / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)
    return x * s, s


def rms_back(dy, x, s):
    n = x.shape[1]
    return s * dy - x * s**3 * np.sum(dy * x, axis=1, keepdims=True) / n


def rope(x, pos, n_head, base, sign=1.0):
    """Adjacent pairs (2i, 2i+1) of each head turned by pos * base^(-2i/head_dim)."""
    n, width = x.shape
    hd = width // n_head
    y = x.reshape(n, n_head, hd).copy()
    i = np.arange(hd // 2)
    theta = sign * pos[:, None] * base ** (-2.0 * i / hd)[None, :]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = y[:, :, 0::2].copy(), y[:, :, 1::2].copy()
    y[:, :, 0::2] = x0 * c - x1 * s
    y[:, :, 1::2] = x0 * s + x1 * c
    return y.reshape(n, width)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Model:
    def __init__(self, d):
        (self.V, self.D, self.L, self.H, self.HKV, self.FF, self.T, self.B) = d["shape"]
        o = d["opt"]
        self.lr, self.min_lr, self.warmup, self.total = o[0], o[1], int(o[2]), int(o[3])
        self.b1, self.b2, self.adam_eps, self.wd, self.clip, self.eps, self.base = o[4:11]
        self.hd = self.D // self.H

    def attention(self, q, k, v, seq_len):
        """Per sequence, per head: causal softmax(scale q k^T) v, kv head h // group."""
        n = q.shape[0]
        hd, group = self.hd, self.H // self.HKV
        out = np.zeros_like(q)
        cache = []
        mask = np.tril(np.ones((seq_len, seq_len), dtype=bool))
        for b in range(n // seq_len):
            r = slice(b * seq_len, (b + 1) * seq_len)
            for h in range(self.H):
                g = h // group
                qh = q[r, h * hd:(h + 1) * hd]
                kh = k[r, g * hd:(g + 1) * hd]
                vh = v[r, g * hd:(g + 1) * hd]
                sc = qh @ kh.T / np.sqrt(hd)
                sc = np.where(mask, sc, -np.inf)
                p = np.exp(sc - sc.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                out[r, h * hd:(h + 1) * hd] = p @ vh
                cache.append((r, h, g, p))
        return out, cache

    def attention_back(self, dout, q, k, v, cache):
        hd = self.hd
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        scale = 1.0 / np.sqrt(hd)
        for r, h, g, p in cache:
            qs, ks = slice(h * hd, (h + 1) * hd), slice(g * hd, (g + 1) * hd)
            do = dout[r, qs]
            dv[r, ks] += p.T @ do
            dp = do @ v[r, ks].T
            ds = p * (dp - np.sum(dp * p, axis=1, keepdims=True))
            dq[r, qs] += scale * ds @ k[r, ks]
            dk[r, ks] += scale * ds.T @ q[r, qs]
        return dq, dk, dv

    def loss_and_grads(self, P, tokens):
        T, B = self.T, self.B
        tok = tokens.reshape(B, T + 1)
        inp, tgt = tok[:, :T].reshape(-1), tok[:, 1:].reshape(-1)
        pos = np.tile(np.arange(T, dtype=np.float64), B)
        n = inp.size
        x = P["token_embd.weight"][inp]
        layers = []
        for l in range(self.L):
            w = lambda s: P["blk.%d.%s.weight" % (l, s)]
            c = {"x": x}
            c["n1"], c["s1"] = rms(x, self.eps)
            h1 = c["n1"] * w("attn_norm")
            c["h1"] = h1
            q, k, v = h1 @ w("attn_q").T, h1 @ w("attn_k").T, h1 @ w("attn_v").T
            qr, kr = rope(q, pos, self.H, self.base), rope(k, pos, self.HKV, self.base)
            a, c["attn"] = self.attention(qr, kr, v, T)
            c.update(qr=qr, kr=kr, v=v, a=a)
            x2 = x + a @ w("attn_output").T
            c["x2"] = x2
            c["n2"], c["s2"] = rms(x2, self.eps)
            h2 = c["n2"] * w("ffn_norm")
            c["h2"] = h2
            gt, up = h2 @ w("ffn_gate").T, h2 @ w("ffn_up").T
            f = gt * sigmoid(gt) * up
            c.update(gt=gt, up=up, f=f)
            x = x2 + f @ w("ffn_down").T
            layers.append(c)
        nf, sf = rms(x, self.eps)
        hf = nf * P["output_norm.weight"]
        logits = hf @ P["output.weight"].T
        m = logits.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
        loss = np.mean(lse - logits[np.arange(n), tgt])

        G = {}
        dlog = np.exp(logits - lse[:, None])
        dlog[np.arange(n), tgt] -= 1.0
        dlog /= n
        G["output.weight"] = dlog.T @ hf
        dhf = dlog @ P["output.weight"]
        G["output_norm.weight"] = np.sum(dhf * nf, axis=0, keepdims=True)
        dx = rms_back(dhf * P["output_norm.weight"], x, sf)
        for l in reversed(range(self.L)):
            w = lambda s: P["blk.%d.%s.weight" % (l, s)]
            c = layers[l]
            gname = lambda s: "blk.%d.%s.weight" % (l, s)
            # x = x2 + f Wd^T
            G[gname("ffn_down")] = dx.T @ c["f"]
            df = dx @ w("ffn_down")
            sg = sigmoid(c["gt"])
            dgt = df * c["up"] * (sg + c["gt"] * sg * (1.0 - sg))
            dup = df * c["gt"] * sg
            G[gname("ffn_gate")] = dgt.T @ c["h2"]
            G[gname("ffn_up")] = dup.T @ c["h2"]
            dh2 = dgt @ w("ffn_gate") + dup @ w("ffn_up")
            G[gname("ffn_norm")] = np.sum(dh2 * c["n2"], axis=0, keepdims=True)
            dx2 = dx + rms_back(dh2 * w("ffn_norm"), c["x2"], c["s2"])
            # x2 = x + a Wo^T
            G[gname("attn_output")] = dx2.T @ c["a"]
            da = dx2 @ w("attn_output")
            dqr, dkr, dv = self.attention_back(da, c["qr"], c["kr"], c["v"], c["attn"])
            dq = rope(dqr, pos, self.H, self.base, sign=-1.0)
            dk = rope(dkr, pos, self.HKV, self.base, sign=-1.0)
            G[gname("attn_q")] = dq.T @ c["h1"]
            G[gname("attn_k")] = dk.T @ c["h1"]
            G[gname("attn_v")] = dv.T @ c["h1"]
            dh1 = dq @ w("attn_q") + dk @ w("attn_k") + dv @ w("attn_v")
            G[gname("attn_norm")] = np.sum(dh1 * c["n1"], axis=0, keepdims=True)
            dx = dx2 + rms_back(dh1 * w("attn_norm"), c["x"], c["s1"])
        dE = np.zeros_like(P["token_embd.weight"])
        np.add.at(dE, inp, dx)
        G["token_embd.weight"] = dE
        return loss, G

    def lr_at(self, u):
        if self.warmup > 0 and u < self.warmup:
            return self.lr * (u + 1) / self.warmup
        if self.total <= self.warmup:
            return self.lr
        if u >= self.total:
            return self.min_lr
        prog = (u - self.warmup) / (self.total - self.warmup)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + np.cos(np.pi * prog))

    def adamw(self, P, G, M, S, u):
        """Clip to a global norm, then AdamW with bias correction; decay on matrices only."""
        norm = np.sqrt(sum(np.sum(g * g) for g in G.values()))
        scale = min(1.0, self.clip / norm) if self.clip > 0 else 1.0
        lr, t = self.lr_at(u), u + 1
        out = {}
        for name, w in P.items():
            g = G[name] * scale
            M[name] = self.b1 * M[name] + (1 - self.b1) * g
            S[name] = self.b2 * S[name] + (1 - self.b2) * g * g
            mh, vh = M[name] / (1 - self.b1**t), S[name] / (1 - self.b2**t)
            decay = self.wd if w.shape[0] > 1 else 0.0
            out[name] = w - lr * (mh / (np.sqrt(vh) + self.adam_eps) + decay * w)
        return out, norm


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    exe, backend = sys.argv[1], sys.argv[2]
    run = subprocess.run([exe, backend, "2"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("train_step_dump failed (%d): %s" % (run.returncode, run.stderr))
    d = parse(run.stdout)
    model = Model(d)
    P = dict(d["init"])
    M = {k: np.zeros_like(v) for k, v in P.items()}
    S = {k: np.zeros_like(v) for k, v in P.items()}
    worst, failures = 0.0, []
    for step in (1, 2):
        loss, G = model.loss_and_grads(P, d["tokens"])
        newP, norm = model.adamw(P, G, M, S, step - 1)
        checks = [("loss", np.array([d["loss%d" % step]]), np.array([loss]))]
        for name in d["order"]:
            checks.append(("grad " + name, d["grad%d" % step][name], G[name]))
            checks.append(("update " + name, d["after%d" % step][name] - d[
                "after%d" % (step - 1) if step > 1 else "init"][name], newP[name] - P[name]))
        for what, ours, theirs in checks:
            e = rel(ours, theirs)
            worst = max(worst, e)
            if not e <= TOL:
                failures.append("step %d %s: relative error %.3e" % (step, what, e))
        print("%s step %d: loss %.6f (numpy %.6f), gradient norm %.4f, worst relative error so "
              "far %.2e" % (backend, step, d["loss%d" % step], loss, norm, worst))
        # the next step starts from the engine's weights, as the engine's did
        P = {k: d["after%d" % step][k] for k in P}
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
