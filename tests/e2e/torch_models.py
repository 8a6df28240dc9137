"""Small PyTorch transformers that the end-to-end tests export to ONNX and run through megac.

GptModel follows GPT-2 / nanoGPT (pre-LN, fused qkv linear, learned positions, causal mask as a
registered buffer, tied or untied head); BertModel is a post-LN encoder with an additive padding
mask and an MLM head. Weights are random (seeded), never downloaded.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, hidden, heads, seq, gelu):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, seq)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)
        self.gelu = nn.GELU(approximate=gelu)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GptModel(nn.Module):
    def __init__(self, layers=2, hidden=64, heads=4, seq=32, vocab=128, gelu="none", tied=True):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.h = nn.ModuleList([Block(hidden, heads, seq, gelu) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif p.dim() == 1:
                # Non-trivial norms and biases so a wrong mapping shows up in the logits.
                nn.init.normal_(p, 1.0 if "ln" in name and "weight" in name else 0.0, 0.1)

    def forward(self, input_ids):
        t = input_ids.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x, additive_mask):
        b, t, c = x.size()
        d = c // self.heads
        q = self.query(x).view(b, t, self.heads, d).permute(0, 2, 1, 3)
        k = self.key(x).view(b, t, self.heads, d).permute(0, 2, 1, 3)
        v = self.value(x).view(b, t, self.heads, d).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + additive_mask
        probs = F.softmax(scores, dim=-1)
        y = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous().view(b, t, c)
        return self.out(y)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.attn = BertSelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, additive_mask):
        x = self.ln1(x + self.attn(x, additive_mask))
        return self.ln2(x + self.proj(F.gelu(self.fc(x))))


class BertModel(nn.Module):
    def __init__(self, layers=2, hidden=64, heads=4, seq=32, vocab=128):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.ln_emb = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(hidden, heads) for _ in range(layers)])
        self.transform = nn.Linear(hidden, hidden)
        self.ln_mlm = nn.LayerNorm(hidden, eps=1e-12)
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            else:
                nn.init.normal_(p, 1.0 if "ln" in name and "weight" in name else 0.0, 0.1)

    def forward(self, input_ids, attention_mask):
        t = input_ids.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device)
        x = self.ln_emb(self.wte(input_ids) + self.wpe(pos))
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, additive)
        h = self.ln_mlm(F.gelu(self.transform(x)))
        return F.linear(h, self.wte.weight, self.decoder_bias)
