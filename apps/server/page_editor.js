// The inpainting editor of the web page (page.html inlines this file; apps/server/CMakeLists.txt):
// the image to edit with a canvas over it on which the user paints what to repaint, and the mask
// /v1/images/edits takes, made from that canvas.
//
// The canvas has the image's own pixel size, so each of its pixels is one pixel of the mask the
// request sends. It holds the painted area as opaque pixels of one colour (CSS shows them
// translucent) and is made strictly binary when a stroke ends: a brush's soft edge would otherwise
// be a half-transparent pixel whose fate (repaint or keep) the user cannot see.
"use strict";
const editor = (() => {
  const byId = (id) => document.getElementById(id);
  const canvas = byId("mask");
  // Read back after every stroke: keep the pixels on the CPU side.
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const INK = [224, 0, 120];
  let source = null;   // the File being edited, or null: plain generation
  let shown_url = "";  // the object URL the picture shows, revoked when it changes
  let stroke = null;   // the pointer painting now: { id, x, y }; one at a time, so a palm is ignored
  let required = false;

  // Where a pointer is, in the image's pixels: the canvas is scaled by CSS to the picture's box.
  function at(e) {
    const r = canvas.getBoundingClientRect();
    return { x: (e.clientX - r.left) * canvas.width / r.width,
             y: (e.clientY - r.top) * canvas.height / r.height };
  }
  function size() { return parseInt(byId("brush").value); }
  function erasing() { return byId("tool-erase").checked; }

  function dab(from, to) {
    ctx.globalCompositeOperation = erasing() ? "destination-out" : "source-over";
    ctx.fillStyle = ctx.strokeStyle = "rgb(" + INK.join(",") + ")";
    ctx.lineWidth = size();
    ctx.lineCap = ctx.lineJoin = "round";
    ctx.beginPath();
    if (from.x === to.x && from.y === to.y) {  // a tap: a zero-length line draws nothing
      ctx.arc(to.x, to.y, size() / 2, 0, 2 * Math.PI);
      ctx.fill();
    } else {
      ctx.moveTo(from.x, from.y);
      ctx.lineTo(to.x, to.y);
      ctx.stroke();
    }
  }

  // Rewrites every pixel as painted (INK, opaque) or not (transparent) by `painted(alpha)`.
  function remap(painted) {
    if (!canvas.width) return;
    const image = ctx.getImageData(0, 0, canvas.width, canvas.height);
    const d = image.data;
    for (let i = 0; i < d.length; i += 4) {
      const on = painted(d[i + 3]);
      d[i] = INK[0]; d[i + 1] = INK[1]; d[i + 2] = INK[2]; d[i + 3] = on ? 255 : 0;
    }
    ctx.putImageData(image, 0, 0);
  }
  const binarise = () => remap((a) => a >= 128);

  canvas.addEventListener("pointerdown", (e) => {
    if (stroke || !source || (e.pointerType === "mouse" && e.button !== 0)) return;
    e.preventDefault();
    canvas.setPointerCapture(e.pointerId);
    const p = at(e);
    stroke = { id: e.pointerId, x: p.x, y: p.y };
    dab(p, p);
  });
  canvas.addEventListener("pointermove", (e) => {
    if (!stroke || e.pointerId !== stroke.id) return;
    // The moves the browser merged into this event: a fast stroke stays a smooth line.
    const moves = e.getCoalescedEvents ? e.getCoalescedEvents() : [];
    for (const m of moves.length ? moves : [e]) {
      const p = at(m);
      dab(stroke, p);
      stroke.x = p.x;
      stroke.y = p.y;
    }
  });
  const end = (e) => {
    if (!stroke || e.pointerId !== stroke.id) return;
    stroke = null;
    binarise();
  };
  canvas.addEventListener("pointerup", end);
  canvas.addEventListener("pointercancel", end);
  // A long press on a touch screen opens the context menu; on the mask it is a brush stroke.
  canvas.addEventListener("contextmenu", (e) => e.preventDefault());

  byId("brush").addEventListener("input", () => { byId("brush-size").value = byId("brush").value; });
  byId("clear").addEventListener("click", () => ctx.clearRect(0, 0, canvas.width, canvas.height));
  byId("invert").addEventListener("click", () => remap((a) => a < 128));

  function painted_pixels() {
    if (!canvas.width) return 0;
    const d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) n += d[i] >= 128 ? 1 : 0;
    return n;
  }

  function clear_result() {
    byId("result").hidden = true;
    byId("result").removeAttribute("src");
    byId("result-caption").textContent = "The edited image appears here.";
    byId("previews").replaceChildren();
  }

  async function load(file) {
    const view = byId("source-view");
    const url = URL.createObjectURL(file);
    view.src = url;
    try {
      await view.decode();
    } catch (e) {
      URL.revokeObjectURL(url);
      unload();
      throw new Error(file.name + " is not an image this browser can read");
    }
    if (shown_url) URL.revokeObjectURL(shown_url);
    shown_url = url;
    // The browser applies EXIF orientation as the server does, so both see the upright size.
    canvas.width = view.naturalWidth;  // also empties the canvas
    canvas.height = view.naturalHeight;
    const side = Math.max(canvas.width, canvas.height);
    byId("brush").max = String(Math.max(16, Math.round(side / 4)));
    byId("brush").value = String(Math.max(1, Math.round(side / 10)));
    byId("brush-size").value = byId("brush").value;
    source = file;
    byId("source-caption").textContent = file.name + ", " + canvas.width + "x" + canvas.height +
        ": paint over what to repaint";
    byId("editor").hidden = false;
    byId("unload").disabled = false;
    clear_result();
  }

  function unload() {
    source = null;
    byId("source").value = "";
    byId("editor").hidden = true;
    byId("unload").disabled = true;
    byId("source-view").removeAttribute("src");
    if (shown_url) URL.revokeObjectURL(shown_url);
    shown_url = "";
    canvas.width = canvas.height = 0;
  }

  byId("source").addEventListener("change", () => {
    const file = byId("source").files[0];
    if (!file) return unload();
    load(file).catch((e) => { byId("status").textContent = "error: " + e.message; });
  });
  byId("unload").addEventListener("click", unload);

  // PNG chunks carry a CRC-32 (the ISO 3309 polynomial, as zlib's), computed with a table.
  const CRC = new Uint32Array(256).map((_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c;
  });
  function chunk(type, data) {
    const out = new Uint8Array(12 + data.length);
    const view = new DataView(out.buffer);
    view.setUint32(0, data.length);
    for (let i = 0; i < 4; i++) out[4 + i] = type.charCodeAt(i);
    out.set(data, 8);
    let c = 0xffffffff;
    for (const b of out.subarray(4, 8 + data.length)) c = CRC[(c ^ b) & 255] ^ (c >>> 8);
    view.setUint32(8 + data.length, (c ^ 0xffffffff) >>> 0);
    return out;
  }
  // An 8-bit RGBA PNG written here rather than by canvas.toBlob: a canvas stores premultiplied
  // colour, so it cannot keep the white of a fully transparent pixel, which the mask needs.
  async function png_rgba(w, h, rgba) {
    const raw = new Uint8Array(h * (1 + 4 * w));  // each row: filter type 0 (none), then pixels
    for (let y = 0; y < h; y++) raw.set(rgba.subarray(4 * w * y, 4 * w * (y + 1)), y * (1 + 4 * w) + 1);
    // "deflate" is the zlib format (RFC 1950), which is what IDAT holds.
    const zipped = new Blob([raw]).stream().pipeThrough(new CompressionStream("deflate"));
    const idat = new Uint8Array(await new Response(zipped).arrayBuffer());
    const ihdr = new Uint8Array(13);
    new DataView(ihdr.buffer).setUint32(0, w);
    new DataView(ihdr.buffer).setUint32(4, h);
    ihdr.set([8, 6, 0, 0, 0], 8);  // 8 bits, RGBA, deflate, adaptive filters, not interlaced
    const signature = new Uint8Array([137, 80, 78, 71, 13, 10, 26, 10]);
    return new Blob([signature, chunk("IHDR", ihdr), chunk("IDAT", idat), chunk("IEND", new Uint8Array(0))],
                    { type: "image/png" });
  }

  // The request's mask, as OpenAI's images.edit sends one (docs/server.md, Inpainting): a PNG of
  // the image's size, fully transparent where to repaint, opaque elsewhere. The repainted pixels
  // are white and the kept ones black, so a reader that drops alpha (the CLI's --mask, diffusers)
  // finds the same mask in the colour: one file serves the API, the CLI and diffusers.
  async function mask() {
    const w = canvas.width, h = canvas.height;
    const painted = ctx.getImageData(0, 0, w, h).data;
    const rgba = new Uint8Array(4 * w * h);
    for (let i = 0; i < rgba.length; i += 4) {
      const repaint = painted[i + 3] >= 128;
      rgba[i] = rgba[i + 1] = rgba[i + 2] = repaint ? 255 : 0;
      rgba[i + 3] = repaint ? 0 : 255;
    }
    const blob = await png_rgba(w, h, rgba);
    // The same bytes as a data: URL, for the result's "mask" link (the mask to reuse elsewhere).
    const url = await new Promise((done) => {
      const reader = new FileReader();
      reader.onload = () => done(reader.result);
      reader.readAsDataURL(blob);
    });
    return { blob, url };
  }

  return {
    // What /v1/models says the model takes: the inpainting tools only where a mask is taken.
    offer(limits) {
      byId("inpaint").hidden = !limits.mask;
      required = !!limits.mask_required;
      byId("inpaint-help").textContent = required
          ? "This model only edits: load an image, paint over what to repaint, then Generate."
          : "Load an image, paint over what to repaint, then Generate.";
      if (!limits.mask) unload();
    },
    // The inputs of the next request: null when it is a plain generation.
    async inputs() {
      if (!source) {
        if (required) throw new Error("this model edits an image: load one under Inpaint");
        return null;
      }
      if (painted_pixels() === 0) throw new Error("paint over the part of the image to repaint first");
      return { source, mask: await mask() };
    },
    begin() {
      clear_result();
      byId("result-caption").textContent = "queued";
    },
    preview(src, step, steps) {
      byId("result").src = src;
      byId("result").hidden = false;
      byId("result-caption").textContent = "preview at step " + step + " of " + steps;
      const thumb = document.createElement("img");
      thumb.src = src;
      thumb.alt = thumb.title = "step " + step;
      byId("previews").append(thumb);
    },
    finish(src, caption) {
      byId("result").src = src;
      byId("result").hidden = false;
      byId("result-caption").textContent = caption;
    },
    failed(message) { byId("result-caption").textContent = message; },
  };
})();
