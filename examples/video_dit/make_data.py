#!/usr/bin/python3
"""Clips of moving shapes: N clips float32 [N, F, H, W], background −1, shapes +1.

Each clip holds one shape (up to --max-shapes): a filled square or a disc of half-size --radius
(default 3: 6 pixels across) that moves in a straight line in a random direction at --speed
pixels per frame (default 1) and bounces off the frame's edges. Pixels are anti-aliased by 4×4
supersampling, so motion by fractions of a pixel is visible. A range (`--radius 2 3.5`) draws
each clip's value uniformly from it.

    make_data.py --out DIR [--clips N] [--frames F] [--size H] [--radius LO [HI]] [--speed LO [HI]]
                 [--max-shapes K] [--seed S]
writes DIR/clips.npy (and prints its shape); the same seed gives the same array.
"""
import argparse
import os

import numpy as np

SUPER = 4  # supersampling factor per axis


def bounce(p, lo, hi):
    """Reflects positions p into [lo, hi] (a shape's path bouncing between two walls)."""
    span = hi - lo
    q = np.mod(p - lo, 2 * span)
    return lo + np.where(q > span, 2 * span - q, q)


def draw(kind, cx, cy, r, size):
    """Coverage in [0, 1] of a square (kind 0) or disc (kind 1) of half-size r centred at (cx, cy)."""
    c = (np.arange(size * SUPER) + 0.5) / SUPER
    yy, xx = np.meshgrid(c, c, indexing="ij")
    if kind == 0:
        inside = (np.abs(xx - cx) <= r) & (np.abs(yy - cy) <= r)
    else:
        inside = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
    return inside.reshape(size, SUPER, size, SUPER).mean(axis=(1, 3))


def make_clips(n, frames, size, seed, max_shapes=1, radius=(3.0, 3.0), speed=(1.0, 1.0)):
    rng = np.random.default_rng(seed)
    clips = np.zeros((n, frames, size, size), np.float32)
    for i in range(n):
        cover = np.zeros((frames, size, size))
        for _ in range(rng.integers(1, max_shapes + 1)):
            kind = rng.integers(0, 2)
            r = rng.uniform(*radius)
            pos = rng.uniform(r, size - r, 2)
            angle = rng.uniform(0, 2 * np.pi)
            v = rng.uniform(*speed)
            vel = v * np.array([np.cos(angle), np.sin(angle)])
            for f in range(frames):
                x, y = bounce(pos + f * vel, r, size - r)
                cover[f] = np.maximum(cover[f], draw(kind, x, y, r, size))
        clips[i] = 2 * cover - 1
    return clips


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--clips", type=int, default=2048)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-shapes", type=int, default=1, help="shapes per clip: 1 to this many")
    ap.add_argument("--radius", type=float, nargs="+", default=[3.0], help="half-size in pixels, or a range LO HI")
    ap.add_argument("--speed", type=float, nargs="+", default=[1.0], help="pixels per frame, or a range LO HI")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in ("radius", "speed"):
        v = getattr(a, name)
        if len(v) > 2 or v[0] <= 0 or v[-1] < v[0]:
            ap.error(f"--{name} takes a positive value or a range LO HI with LO <= HI")
    if 2 * a.radius[-1] >= a.size:
        ap.error("--radius must leave the shape room to move (2 * radius < --size)")
    clips = make_clips(a.clips, a.frames, a.size, a.seed, a.max_shapes, (a.radius[0], a.radius[-1]),
                       (a.speed[0], a.speed[-1]))
    np.save(os.path.join(a.out, "clips.npy"), clips)
    print(f"{os.path.join(a.out, 'clips.npy')}: float32 {list(clips.shape)}, "
          f"{(clips > 0).mean():.1%} of pixels inside a shape")


if __name__ == "__main__":
    main()
