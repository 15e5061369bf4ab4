"""Clips as pictures: a grid of clips written as an animated GIF, and numbers that say whether a
clip shows moving shapes. Clips are float [N, F, H, W] with background −1 and shapes +1."""
import numpy as np


def grid_frames(clips, cols, zoom=4, gap=2):
    """[N, F, H, W] in [−1, 1] -> F grey frames uint8 [rows·(H·zoom+gap)+gap, cols·(W·zoom+gap)+gap]."""
    n, f, h, w = clips.shape
    rows = -(-n // cols)
    big = np.repeat(np.repeat(clips, zoom, axis=2), zoom, axis=3)
    img = np.full((f, rows * (h * zoom + gap) + gap, cols * (w * zoom + gap) + gap), 96, np.uint8)
    pix = (np.clip((big + 1) / 2, 0, 1) * 255).round().astype(np.uint8)
    for i in range(n):
        r, c = divmod(i, cols)
        y, x = gap + r * (h * zoom + gap), gap + c * (w * zoom + gap)
        img[:, y:y + h * zoom, x:x + w * zoom] = pix[i]
    return img


def write_gif(path, clips, cols=4, frame_ms=150):
    """Writes the clips side by side as one looping animated GIF (needs Pillow: python3-pil)."""
    from PIL import Image
    frames = [Image.fromarray(fr, mode="L") for fr in grid_frames(clips, cols)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=frame_ms, loop=0)


def motion_stats(clips):
    """How much a set of clips looks like moving shapes:
    saturated  the share of pixels within 0.25 of −1 or +1 (the data is two-valued but for edges);
    shape      the share of frames that hold a shape (some pixel above 0);
    motion     the mean distance in pixels the shape pixels' centroid moves from frame to frame
               (frames with a shape only)."""
    c = np.asarray(clips, np.float64)
    saturated = float(np.mean(np.abs(np.abs(c) - 1) < 0.25))
    fg = np.clip(c, 0, None)
    mass = fg.sum(axis=(2, 3))
    has = mass > 0.5
    ys, xs = np.arange(c.shape[2]), np.arange(c.shape[3])
    cy = (fg.sum(axis=3) * ys).sum(axis=2) / np.maximum(mass, 1e-9)
    cx = (fg.sum(axis=2) * xs).sum(axis=2) / np.maximum(mass, 1e-9)
    both = has[:, 1:] & has[:, :-1]
    step = np.hypot(np.diff(cy, axis=1), np.diff(cx, axis=1))
    motion = float(step[both].mean()) if both.any() else 0.0
    return {"saturated": saturated, "shape": float(has.mean()), "motion": motion}


def describe(name, clips):
    s = motion_stats(clips)
    return (f"{name}: {s['saturated']:.0%} of pixels near -1/+1, a shape in {s['shape']:.0%} of frames, "
            f"its centroid moves {s['motion']:.2f} px per frame")
