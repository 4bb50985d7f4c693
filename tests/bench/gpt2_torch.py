#!/usr/bin/python3
"""PyTorch peer of ddpbench's GPT-2 training benchmark (tests/bench/bench_gpt2.py).

  gpt2_torch.py [--batch 4] [--seq-len 64] [--steps 20] [--warmup 3] [--threads 2]
                [--lr 1e-4] [--layers 12] [--heads 12] [--channels 768]

GPT-2 as OpenAI wrote it and ddpbench's gpt2-small is (HF's GPT2LMHeadModel without
dropout): token and learned position embeddings (vocabulary 50257, 1024 positions), 12
pre-norm blocks of LayerNorm, causal multi-head self-attention with one fused qkv linear
and an output projection, LayerNorm, a GELU (tanh) MLP of 4x the channels; a final
LayerNorm and the output projection tied to the token embedding (124,439,808 parameters).
Weights N(0, 0.02), LayerNorm 1 and 0, biases 0. fp32, Adam (PyTorch's, lr --lr, no weight
decay: what llm.c's AdamW with weight_decay 0 and ddpbench's "adam" do), one fixed random
batch of token ids and targets (ddpbench's "synthetic" dataset), trained --warmup + --steps
steps; a step is zero_grad, forward, cross-entropy loss over all tokens, backward and the
optimizer step, timed with perf_counter (the CPU is synchronous), and its forward (with the
loss), backward and optimizer parts on their own. Torch 1.13 has no
scaled_dot_product_attention, so attention is written out (q k^T / sqrt(d), causal mask,
softmax, @ v), as nanoGPT's fallback path does.

Run it with Debian's interpreter (/usr/bin/python3, python3-torch 1.13) and the glibc
settings that keep freed memory (MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296), as
the other peers. --threads goes to torch.set_num_threads and, before torch is imported, to
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS (tests/bench/torch_threads.py).
Prints one JSON line: every timed step's ms, the medians, the parameter count.
"""
import argparse, json, math, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_threads

VOCAB, POSITIONS = 50257, 1024


def build(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self, c, nh):
            super().__init__()
            self.nh = nh
            self.c_attn = nn.Linear(c, 3 * c)
            self.c_proj = nn.Linear(c, c)
            self.register_buffer("mask", torch.tril(torch.ones(POSITIONS, POSITIONS,
                                                               dtype=torch.bool)), False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q = q.view(b, t, self.nh, c // self.nh).transpose(1, 2)
            k = k.view(b, t, self.nh, c // self.nh).transpose(1, 2)
            v = v.view(b, t, self.nh, c // self.nh).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.nh))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self, c, nh):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c)
            self.attn = Attention(c, nh)
            self.ln_2 = nn.LayerNorm(c)
            self.c_fc = nn.Linear(c, 4 * c)
            self.c_proj = nn.Linear(4 * c, c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, layers, heads, c):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, c)
            self.wpe = nn.Embedding(POSITIONS, c)
            self.h = nn.ModuleList([Block(c, heads) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(c)
            self.lm_head = nn.Linear(c, VOCAB, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            return self.lm_head(self.ln_f(x))

    return GPT2(a.layers, a.heads, a.channels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    a = ap.parse_args()
    torch_threads.set_before_import(a.threads)
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = build(a)
    model.train()
    nparams = sum(p.numel() for p in model.parameters())  # the tied weight once
    g = torch.Generator().manual_seed(100)
    x = torch.randint(0, VOCAB, (a.batch, a.seq_len), generator=g)
    y = torch.randint(0, VOCAB, (a.batch, a.seq_len), generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    rows = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if s >= a.warmup:
            rows.append(((t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3,
                         loss.item()))
    med = statistics.median
    print(json.dumps({
        "params": nparams, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "thread_env": torch_threads.describe(),
        "step_ms": [r[0] for r in rows], "step_ms_median": med([r[0] for r in rows]),
        "forward_ms_median": med([r[1] for r in rows]),
        "backward_ms_median": med([r[2] for r in rows]),
        "optimizer_ms_median": med([r[3] for r in rows]), "last_loss": rows[-1][4]}))


if __name__ == "__main__":
    main()
