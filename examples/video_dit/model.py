"""A small spatial-temporal diffusion transformer for clips of moving shapes (the Open-Sora analogue).

Shapes: a clip is float32 [B, F, H, W] (F frames of H x W grey pixels in [-1, 1]); patches are
P x P, so each frame is S = (H/P)·(W/P) tokens of width D and a clip is F·S tokens.

    VideoDiT(x_t [B, F, H, W], tau [B]) -> velocity [B, F, H, W]
        patchify + linear embedding, plus fixed sine-cosine positions: 2-D over a frame's patch
        grid and 1-D over the frames;
        `depth` blocks, each: spatial self-attention (within a frame: the F·B sequences of S
        tokens), temporal self-attention (across frames: the S·B sequences of F tokens), MLP;
        each of the three sublayers pre-normalized by a LayerNorm without affine parameters and
        modulated by adaLN from the timestep embedding (shift, scale before it, a gate after it:
        the conditioning of Peebles & Xie 2023, "Scalable Diffusion Models with Transformers");
        a final adaLN-modulated LayerNorm and a linear projection back to pixels.
    RectifiedFlowLoss(clean [B, F, H, W], noise [B, F, H, W], t int64 [B]) -> loss (scalar)
        tau = t / 1000, x_t = (1 − tau)·clean + tau·noise, the model predicts the velocity
        noise − clean, and loss = mean((velocity − (noise − clean))²) (rectified flow, Liu et al.
        2022, "Flow Straight and Fast"). Sampling integrates dx/dtau = velocity from tau = 1 (noise)
        down to 0 (sample.py).

Attention is written out (q·kᵀ/√d, softmax, ·v) so that colossal-opt fuses it into one attention op;
every trained parameter starts random (no two initializers equal, so torch's exporter keeps them
apart and export.py can pair the two graphs' weights by value).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

T_STEPS = 1000  # timesteps t are integers in [0, T_STEPS); tau = t / T_STEPS


class Config:
    def __init__(self, frames=8, size=16, patch=4, dim=64, heads=4, depth=3, mlp_ratio=4, freq_dim=32):
        self.frames, self.size, self.patch = frames, size, patch
        self.dim, self.heads, self.depth = dim, heads, depth
        self.mlp_ratio, self.freq_dim = mlp_ratio, freq_dim

    def as_dict(self):
        return dict(self.__dict__)


def sincos(pos, dim):
    """[len(pos), dim]: sin(pos·ω_k) for the first dim/2 columns, cos for the rest, ω_k = 10000^(−2k/dim)."""
    omega = torch.exp(torch.arange(dim // 2, dtype=torch.float64) * (-2.0 * math.log(10000.0) / dim))
    arg = pos.to(torch.float64).unsqueeze(1) * omega.unsqueeze(0)
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=1).to(torch.float32)


def spatial_positions(grid, dim):
    """[grid·grid, dim]: the row's table in the first dim/2 columns, the column's in the rest."""
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    return torch.cat([sincos(rows.reshape(-1), dim // 2), sincos(cols.reshape(-1), dim // 2)], dim=1)


def modulate(x, shift, scale):
    """x [B, N, D] · (1 + scale) + shift, with shift and scale [B, D] broadcast over the tokens."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class SelfAttention(nn.Module):
    """Multi-head self-attention over the middle dim of [G, L, D] (G sequences of L tokens)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        g, n, d = x.shape
        h = self.heads
        # q, k and v split off the last dim before the heads are formed (as GPT-2 does), so that
        # under tensor parallelism each rank keeps its heads of all three (docs/parallelism.md).
        q, k, v = (t.reshape(g, n, h, d // h).transpose(1, 2) for t in self.qkv(x).split(d, dim=2))
        att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // h)), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(g, n, d))


class Block(nn.Module):
    """Spatial attention, temporal attention and an MLP on tokens [B, F·S, D], each adaLN-modulated."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg.dim
        self.frames = cfg.frames
        self.spatial = SelfAttention(d, cfg.heads)
        self.temporal = SelfAttention(d, cfg.heads)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(), nn.Linear(cfg.mlp_ratio * d, d))
        self.ada = nn.Linear(d, 9 * d)  # shift, scale, gate for each of the three sublayers

    def forward(self, x, c):
        b, n, d = x.shape
        f = self.frames
        s = n // f
        sh1, sc1, g1, sh2, sc2, g2, sh3, sc3, g3 = self.ada(F.silu(c)).chunk(9, dim=1)
        # Spatial: the S tokens of each frame attend to each other ([B·F, S, D]).
        h = modulate(F.layer_norm(x, (d,)), sh1, sc1).reshape(b * f, s, d)
        x = x + g1.unsqueeze(1) * self.spatial(h).reshape(b, n, d)
        # Temporal: each patch position attends across the F frames ([B·S, F, D]).
        h = modulate(F.layer_norm(x, (d,)), sh2, sc2).reshape(b, f, s, d).transpose(1, 2).reshape(b * s, f, d)
        x = x + g2.unsqueeze(1) * self.temporal(h).reshape(b, s, f, d).transpose(1, 2).reshape(b, n, d)
        return x + g3.unsqueeze(1) * self.mlp(modulate(F.layer_norm(x, (d,)), sh3, sc3))


class VideoDiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, p = cfg.dim, cfg.patch
        self.grid = cfg.size // p
        self.embed = nn.Linear(p * p, d)
        # Fixed sine-cosine positions, as DiT's (2-D over the patch grid: half the width for the
        # row, half for the column) and a 1-D table over the frames; shaped to broadcast over
        # [B, F, S, D] as they are, so that the exporter keeps their names. Parameters that do not
        # train (the specs freeze them, see `freqs` below).
        self.pos_spatial = nn.Parameter(spatial_positions(self.grid, d), requires_grad=False)  # [S, D]
        self.pos_temporal = nn.Parameter(sincos(torch.arange(cfg.frames), d).unsqueeze(1), requires_grad=False)
        # The sinusoidal frequencies 10000^(−k/half): a fixed table. Like the position tables it is
        # a parameter that does not train (rather than a buffer) so that the exporter keeps it as
        # an initializer of that name: colossal-opt would otherwise train the float Constant a
        # Mul reads (docs/training.md "Which initializers train"); the specs freeze all three.
        half = cfg.freq_dim // 2
        table = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(10000.0) / half))
        self.freqs = nn.Parameter(table.unsqueeze(0), requires_grad=False)  # [1, half]
        self.t_mlp = nn.Sequential(nn.Linear(cfg.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.depth)])
        self.final_ada = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, p * p)
        # adaLN starts near the identity (DiT zero-initializes it; small random values keep every
        # initializer distinct and the gates open a little from the first step).
        for m in [blk.ada for blk in self.blocks] + [self.final_ada, self.out]:
            nn.init.normal_(m.weight, std=0.02)
            nn.init.normal_(m.bias, std=0.02)

    def timestep_embedding(self, tau):
        """Sinusoidal features of tau·1000 [B] -> [B, freq_dim] (cos, then sin)."""
        args = (tau * T_STEPS).unsqueeze(1) * self.freqs
        return torch.cat([torch.cos(args), torch.sin(args)], dim=1)

    def forward(self, x, tau):
        cfg = self.cfg
        b, f, p, g, d = x.shape[0], cfg.frames, cfg.patch, self.grid, cfg.dim
        # Patchify: [B, F, H, W] -> [B, F, g, P, g, P] -> [B, F, g, g, P, P] -> tokens [B, F, g·g, P·P].
        tok = x.reshape(b, f, g, p, g, p).permute(0, 1, 2, 4, 3, 5).reshape(b, f, g * g, p * p)
        h = self.embed(tok) + self.pos_spatial + self.pos_temporal
        h = h.reshape(b, f * g * g, d)
        c = self.t_mlp(self.timestep_embedding(tau))
        for blk in self.blocks:
            h = blk(h, c)
        shift, scale = self.final_ada(F.silu(c)).chunk(2, dim=1)
        out = self.out(modulate(F.layer_norm(h, (d,)), shift, scale))  # [B, F·g·g, P·P]
        out = out.reshape(b, f, g, g, p, p).permute(0, 1, 2, 4, 3, 5)
        return out.reshape(b, f, g * p, g * p)


class RectifiedFlowLoss(nn.Module):
    """The training graph: the loss of VideoDiT from (clean clip, noise, integer timestep)."""

    def __init__(self, dit):
        super().__init__()
        self.dit = dit

    def forward(self, clean, noise, t):
        tau = t.to(torch.float32) / T_STEPS
        w = tau.reshape(-1, 1, 1, 1)
        x_t = (1 - w) * clean + w * noise
        return ((self.dit(x_t, tau) - (noise - clean)) ** 2).mean()
