"""lora_model.py - a small transformer classifier with hand-written LoRA
adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
Models"), for Fashion-MNIST read as a sequence of its 28 rows.

    x (N, 28, 28): 28 tokens of 28 features (a (N, 1, 28, 28) batch is read so too)
    embed   LoRALinear 28 -> d              (N, 28, d)   + pos (28, d)
    blocks  L x pre-norm transformer block  (N, 28, d)
              attn: ln1, q k v o LoRALinear d -> d, H heads of d/H
              mlp:  ln2, fc1 d -> m, GELU, fc2 m -> d       (m = 2d)
    norm    LayerNorm, mean over the tokens (N, d)
    head    Linear d -> 10                  logits (N, 10)

A LoRALinear keeps the (frozen) base weight W (out, in) and bias, and adds
the low-rank update of rank r:

    y = x W^T + b + (alpha / r) (x A^T) B^T     A = lora_A (r, in), B = lora_B (out, r)

A starts like nn.Linear's weight (Kaiming-uniform), B at zero, so that an
untrained adapter changes nothing.  Every adapter tensor has "lora_" in its
name (blocks.0.attn.q.lora_A ...): a federation selects them with the
pattern "*lora_*" and the trainer freezes everything else.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ, FEATURES, CLASSES = 28, 28, 10


class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, r=4, alpha=8.0, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))  # (out, in)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            bound = 1.0 / math.sqrt(in_features)
            nn.init.uniform_(self.bias, -bound, bound)
        self.r = r
        if r > 0:
            self.lora_A = nn.Parameter(torch.empty(r, in_features))   # (r, in)
            self.lora_B = nn.Parameter(torch.zeros(out_features, r))  # (out, r)
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.scaling = alpha / r

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        if self.r > 0:
            y = y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling
        return y

    def reset_lora(self):
        """A fresh adapter: A Kaiming-uniform, B zero."""
        if self.r > 0:
            with torch.no_grad():
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
                self.lora_B.zero_()


class Attention(nn.Module):
    def __init__(self, d, heads, r, alpha):
        super().__init__()
        self.heads = heads
        self.q = LoRALinear(d, d, r, alpha)
        self.k = LoRALinear(d, d, r, alpha)
        self.v = LoRALinear(d, d, r, alpha)
        self.o = LoRALinear(d, d, r, alpha)

    def forward(self, x):  # (N, T, d)
        n, t, d = x.shape
        h, dh = self.heads, d // self.heads

        def split(z):  # (N, T, d) -> (N, H, T, dh)
            return z.view(n, t, h, dh).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1)  # (N, H, T, T)
        y = (att @ v).transpose(1, 2).reshape(n, t, d)
        return self.o(y)


class MLP(nn.Module):
    def __init__(self, d, m, r, alpha):
        super().__init__()
        self.fc1 = LoRALinear(d, m, r, alpha)
        self.fc2 = LoRALinear(m, d, r, alpha)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d, heads, m, r, alpha):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, r, alpha)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, m, r, alpha)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class RowTransformer(nn.Module):
    def __init__(self, d=64, layers=2, heads=4, r=4, alpha=8.0):
        super().__init__()
        self.embed = LoRALinear(FEATURES, d, r, alpha)
        self.pos = nn.Parameter(torch.randn(SEQ, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, 2 * d, r, alpha) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, x):
        x = x.reshape(x.shape[0], SEQ, FEATURES)
        x = self.embed(x) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x).mean(dim=1))

    def lora_layers(self):
        return [m for m in self.modules() if isinstance(m, LoRALinear)]


def is_lora(name):
    return "lora_" in name


def add_arch_args(ap):
    """The architecture options, shared by make_init.py and train.py."""
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--rank", type=int, default=4, help="LoRA rank r (4)")
    ap.add_argument("--alpha", type=float, default=8.0, help="LoRA alpha (8): scaling alpha/r")


def build(a):
    """The RowTransformer of the options add_arch_args adds."""
    return RowTransformer(d=a.dim, layers=a.layers, heads=a.heads, r=a.rank, alpha=a.alpha)
