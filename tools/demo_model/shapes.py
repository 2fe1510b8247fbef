"""Procedural training data for the demo model: flat-colour shapes with templated captions,
plus the pixel classifier that checks a rendered image against its caption.

Everything is drawn on the fly from a seeded numpy Generator; nothing is downloaded. The
classifier rules are mirrored in C++ by tests/pipelines/test_demo_model.cpp, so change both
together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = 64
SUPERSAMPLE = 4  # drawn at 4x and box-filtered down, so edges are anti-aliased

# Ten well separated colours: the classifier picks the nearest one in RGB.
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 70, 230),
    "yellow": (245, 220, 30),
    "orange": (245, 135, 20),
    "purple": (130, 40, 170),
    "pink": (250, 140, 200),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
    "gray": (128, 128, 128),
}
COLOUR_NAMES = list(COLOURS)
SHAPES = ["circle", "square", "triangle", "star", "ring", "cross", "diamond"]

# Position name -> (horizontal, vertical) in {-1, 0, 1}; -1 is left / top.
POSITIONS = {
    "centre": (0, 0),
    "left": (-1, 0),
    "right": (1, 0),
    "top": (0, -1),
    "bottom": (0, 1),
    "top left": (-1, -1),
    "top right": (1, -1),
    "bottom left": (-1, 1),
    "bottom right": (1, 1),
}
POSITION_NAMES = list(POSITIONS)
OFFSET = 0.24  # shape centres at 0.5 +- OFFSET of the side
SIZES = {"small": 0.12, "large": 0.21}  # radius as a fraction of the side


def is_held_out(shape_colour: str, background: str) -> bool:
    """Shape/background colour pairs never drawn in training (about one in ten ordered pairs);
    evaluate.py draws its prompts from exactly these."""
    i, j = COLOUR_NAMES.index(shape_colour), COLOUR_NAMES.index(background)
    return i != j and (3 * i + j) % 10 == 4


@dataclass
class ShapeSpec:
    shape: str
    colour: str
    position: str
    size: str


@dataclass
class Scene:
    background: str
    shapes: list[ShapeSpec] = field(default_factory=list)
    caption: str = ""


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _position_phrase(position: str, rng: np.random.Generator) -> str:
    if position == "centre":
        return rng.choice(["in the centre", "in the center", "in the middle"])
    if position in ("left", "right"):
        return f"on the {position}"
    return f"at the {position}"


def caption_single(spec: ShapeSpec, background: str, rng: np.random.Generator, partial: float = 0.0) -> str:
    """The scene's caption; with probability `partial` it names only the shape (half of those) or
    only the background, so each colour word is also seen without the other and the model learns
    them as separate attributes rather than as memorised pairs (the held-out pairs need that)."""
    # rng is consumed only when partial > 0, so runs without it draw exactly the data they always did
    part = None
    if partial > 0 and rng.random() < partial:
        part = "shape" if rng.random() < 0.5 else "background"
    if part == "background":
        return f"{article(background)} {background} background"
    words = []
    if rng.random() < 0.6:
        words.append(spec.size)
    words += [spec.colour, spec.shape]
    words.insert(0, article(words[0]))
    # A caption without a position means the centre, so "a red circle on a blue background"
    # draws the circle in the middle.
    if spec.position != "centre" or rng.random() < 0.5:
        words.append(_position_phrase(spec.position, rng))
    if part != "shape":
        words.append(f"on {article(background)} {background} background")
    return " ".join(words)


def caption_pair(a: ShapeSpec, b: ShapeSpec, background: str) -> str:
    return (f"{article(a.colour)} {a.colour} {a.shape} on the {a.position} and {article(b.colour)} {b.colour} "
            f"{b.shape} on the {b.position}, on {article(background)} {background} background")


def random_scene(rng: np.random.Generator, allow_held_out: bool = False, partial: float = 0.0) -> Scene:
    while True:
        background = rng.choice(COLOUR_NAMES)
        if rng.random() < 0.75:
            colour = rng.choice([c for c in COLOUR_NAMES if c != background])
            spec = ShapeSpec(rng.choice(SHAPES), colour, rng.choice(POSITION_NAMES), rng.choice(list(SIZES)))
            if not allow_held_out and is_held_out(colour, background):
                continue
            return Scene(background, [spec], caption_single(spec, background, rng, partial))
        colours = rng.choice([c for c in COLOUR_NAMES if c != background], size=2, replace=False)
        if not allow_held_out and any(is_held_out(c, background) for c in colours):
            continue
        places = ("left", "right") if rng.random() < 0.5 else ("top", "bottom")
        if rng.random() < 0.5:
            places = places[::-1]
        a = ShapeSpec(rng.choice(SHAPES), colours[0], places[0], "small")
        b = ShapeSpec(rng.choice(SHAPES), colours[1], places[1], "small")
        return Scene(background, [a, b], caption_pair(a, b, background))


def _star(cx, cy, r, points=5, inner=0.45, phase=-math.pi / 2):
    out = []
    for k in range(2 * points):
        rr = r if k % 2 == 0 else r * inner
        a = phase + k * math.pi / points
        out.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
    return out


def _draw_shape(draw: ImageDraw.ImageDraw, spec: ShapeSpec, cx: float, cy: float, r: float):
    fill = COLOURS[spec.colour]
    if spec.shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif spec.shape == "square":
        s = r * 0.88
        draw.rectangle([cx - s, cy - s, cx + s, cy + s], fill=fill)
    elif spec.shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r * 0.95, cy + r * 0.75), (cx - r * 0.95, cy + r * 0.75)], fill=fill)
    elif spec.shape == "star":
        draw.polygon(_star(cx, cy, r * 1.1), fill=fill)
    elif spec.shape == "ring":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=fill, width=max(1, int(r * 0.4)))
    elif spec.shape == "cross":
        w = r * 0.36
        draw.rectangle([cx - r, cy - w, cx + r, cy + w], fill=fill)
        draw.rectangle([cx - w, cy - r, cx + w, cy + r], fill=fill)
    elif spec.shape == "diamond":
        draw.polygon([(cx, cy - r * 1.1), (cx + r * 0.8, cy), (cx, cy + r * 1.1), (cx - r * 0.8, cy)], fill=fill)
    else:
        raise ValueError(f"unknown shape {spec.shape!r}")


def render_scene(scene: Scene, rng: np.random.Generator, size: int = IMAGE_SIZE) -> np.ndarray:
    """uint8 [size, size, 3]; small jitter of place and size so the model does not memorise pixels."""
    big = size * SUPERSAMPLE
    image = Image.new("RGB", (big, big), COLOURS[scene.background])
    draw = ImageDraw.Draw(image)
    for spec in scene.shapes:
        hx, vy = POSITIONS[spec.position]
        cx = (0.5 + hx * OFFSET + rng.uniform(-0.03, 0.03)) * big
        cy = (0.5 + vy * OFFSET + rng.uniform(-0.03, 0.03)) * big
        r = SIZES[spec.size] * rng.uniform(0.9, 1.1) * big
        _draw_shape(draw, spec, cx, cy, r)
    return np.asarray(image.resize((size, size), Image.BOX), dtype=np.uint8)


def batch(rng: np.random.Generator, n: int, allow_held_out: bool = False, partial: float = 0.0):
    scenes = [random_scene(rng, allow_held_out, partial) for _ in range(n)]
    images = np.stack([render_scene(s, rng) for s in scenes])
    return images, [s.caption for s in scenes]


# ----------------------------------------------------------------------------------------------
# Classifier (same rules in tests/pipelines/test_demo_model.cpp)

BORDER = 2  # background = per-channel median of this many outer rows/columns
SHAPE_DISTANCE = 80.0  # a pixel belongs to the shape when this far (RGB L2) from the background
MIN_SHAPE_PIXELS = 12
CENTRE_BAND = (0.40, 0.60)  # centroid inside the band -> 0, below -> -1, above -> +1


def nearest_colour(rgb) -> str:
    rgb = np.asarray(rgb, dtype=np.float64)
    return min(COLOUR_NAMES, key=lambda n: float(np.sum((rgb - np.array(COLOURS[n], dtype=np.float64)) ** 2)))


def classify(image: np.ndarray) -> dict:
    """Background colour, colour and rough position of the (single) shape in an RGB uint8 image."""
    img = image.astype(np.float64)
    h, w, _ = img.shape
    border = np.concatenate([img[:BORDER].reshape(-1, 3), img[-BORDER:].reshape(-1, 3),
                             img[BORDER:-BORDER, :BORDER].reshape(-1, 3), img[BORDER:-BORDER, -BORDER:].reshape(-1, 3)])
    background = np.median(border, axis=0)
    distance = np.sqrt(((img - background) ** 2).sum(axis=2))
    mask = distance > SHAPE_DISTANCE
    result = {"background": nearest_colour(background), "shape_colour": None, "position": None,
              "shape_pixels": int(mask.sum())}
    if mask.sum() < MIN_SHAPE_PIXELS:
        return result
    ys, xs = np.nonzero(mask)
    result["shape_colour"] = nearest_colour(np.median(img[mask], axis=0))
    cx, cy = (xs.mean() + 0.5) / w, (ys.mean() + 0.5) / h

    def band(v):
        return -1 if v < CENTRE_BAND[0] else (1 if v > CENTRE_BAND[1] else 0)

    result["position"] = (band(cx), band(cy))
    return result


def agrees(image: np.ndarray, spec: ShapeSpec, background: str) -> tuple[bool, dict]:
    got = classify(image)
    ok = (got["background"] == background and got["shape_colour"] == spec.colour
          and got["position"] == POSITIONS[spec.position])
    return ok, got
