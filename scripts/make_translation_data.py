"""Tiny image-to-image translation data from the sample photos
(scripts/fetch-sample-data.sh), in MMEditing's folder layouts:

  data/pix2pix_tiny/train/*.png   128x64 (WxH): edge map A | photo B
  data/pix2pix_tiny/test/*.png
  data/cyclegan_tiny/trainA/*.png 64x64 photos
  data/cyclegan_tiny/trainB/*.png 64x64 recoloured photos (other tiles)
  data/cyclegan_tiny/testA, testB

Tiles: each PNG photo is shrunk by an integer factor (block averages) to a
short side of about 128, centre-cropped to 128 x (multiple of 64) and cut
into 64x64 tiles. The edge map is the Sobel magnitude of the tile's luma,
black lines (the strongest 12%) on white, as edges2shoes draws them. The
recolouring is a fixed colour matrix (channels rotated, warmer).

Standard library and numpy only (Debian's python3-numpy): PNG is read and
written here. The JPEG sample photos are not used. Output is the same bytes
on every run; files already holding those bytes are left untouched.

Usage: make_translation_data.py SAMPLE_DIR OUT_DIR   (OUT_DIR: data/)"""
import os
import struct
import sys
import zlib

import numpy as np

TRAIN = ["astronaut.png", "chelsea.png", "coffee.png", "ihc.png"]
TEST = ["motorcycle_left.png"]
TILE = 64


def read_png(path):
    """8-bit, non-interlaced gray/RGB/RGBA/palette PNG -> (H, W, 3) uint8."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG file")
    pos, idat, plte = 8, [], None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            plte = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(body)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or interlace != 0 or channels is None:
        raise SystemExit(f"{path}: only 8-bit non-interlaced PNGs are read here")
    raw = zlib.decompress(b"".join(idat))
    stride = w * channels
    out = np.zeros((h, stride), np.uint8)
    prev = bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        bpp = channels
        if ft == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ft == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif ft == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ft == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        elif ft != 0:
            raise SystemExit(f"{path}: bad PNG filter {ft}")
        out[y] = np.frombuffer(bytes(line), np.uint8)
        prev = line
    img = out.reshape(h, w, channels)
    if ctype == 3:
        img = plte[img[:, :, 0]]
    elif channels in (1, 2):
        img = np.repeat(img[:, :, :1], 3, axis=2)
    return np.ascontiguousarray(img[:, :, :3])


def png_bytes(img):
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def tiles(img):
    """Integer-factor block average to a short side near 128, a centred
    128 x (64 k) crop, 64x64 tiles in row-major order."""
    h, w, _ = img.shape
    f = max(1, min(h, w) // 128)
    h2, w2 = h // f, w // f
    small = img[:h2 * f, :w2 * f].astype(np.float64)
    small = small.reshape(h2, f, w2, f, 3).mean(axis=(1, 3))
    small = np.floor(small + 0.5).astype(np.uint8)
    th = min(h2, 128) // TILE * TILE
    tw = min(w2, 192) // TILE * TILE
    y0, x0 = (h2 - th) // 2, (w2 - tw) // 2
    crop = small[y0:y0 + th, x0:x0 + tw]
    return [crop[y:y + TILE, x:x + TILE] for y in range(0, th, TILE) for x in range(0, tw, TILE)]


def edges(tile):
    luma = tile.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    p = np.pad(luma, 1, mode="edge")
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    mag = np.hypot(gx, gy)
    line = mag >= np.sort(mag, axis=None)[int(mag.size * 0.88)]
    e = np.where(line, 0, 255).astype(np.uint8)
    return np.repeat(e[:, :, None], 3, axis=2)


def recolour(tile):
    m = np.array([[0.20, 0.30, 0.60], [0.60, 0.25, 0.15], [0.30, 0.60, 0.10]]) * 1.1
    v = tile.astype(np.float64) @ m.T + np.array([18.0, 4.0, -10.0])
    return np.clip(np.floor(v + 0.5), 0, 255).astype(np.uint8)


def write(path, img, counts):
    data = png_bytes(img)
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                counts[1] += 1
                return
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    counts[0] += 1


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sample, out = sys.argv[1], sys.argv[2]
    counts = [0, 0]  # written, already there

    def photo_tiles(names, sub):
        res = []
        for n in names:
            path = os.path.join(sample, sub, n)
            if not os.path.exists(path):
                raise SystemExit(f"{path} is missing: run scripts/fetch-sample-data.sh first")
            stem = os.path.splitext(n)[0]
            res += [(f"{stem}_{i}", t) for i, t in enumerate(tiles(read_png(path)))]
        return res

    train, test = photo_tiles(TRAIN, "train"), photo_tiles(TEST, "val")
    p2p = os.path.join(out, "pix2pix_tiny")
    for phase, items in (("train", train), ("test", test)):
        for name, t in items:
            write(os.path.join(p2p, phase, name + ".png"), np.concatenate([edges(t), t], 1),
                  counts)
    cg = os.path.join(out, "cyclegan_tiny")
    # Unpaired: A and B hold different tiles (even / odd), B recoloured.
    for name, t in train[0::2]:
        write(os.path.join(cg, "trainA", name + ".png"), t, counts)
    for name, t in train[1::2]:
        write(os.path.join(cg, "trainB", name + ".png"), recolour(t), counts)
    for name, t in test:
        write(os.path.join(cg, "testA", name + ".png"), t, counts)
    for name, t in test[:4]:
        write(os.path.join(cg, "testB", name + ".png"), recolour(t), counts)
    print(f"make-translation-data: {p2p} ({len(train)} train, {len(test)} test pairs), {cg} "
          f"(trainA {len(train[0::2])}, trainB {len(train[1::2])}, testA {len(test)}, "
          f"testB {len(test[:4])}); {counts[0]} files written, {counts[1]} already there")


if __name__ == "__main__":
    main()
