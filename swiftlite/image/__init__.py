"""Image variants (issue 40): a query on an object's URL names a resized, re-encoded copy.

- `grammar`: the `?image=` language, parsed into a `Variant` whose canonical text is the
  cache key (with the original's ETag);
- `formats`: output formats, their content types, and `format:auto` from an Accept header;
- `limits`: what a variant may cost (source pixels, bytes, output side), and the refusals
  (`ImageRefused`: 400 bad grammar, 415 not an image, 422 too large) every caller maps to a
  client status, never a 5xx;
- `render`: decode, transform, encode: a pure function of bytes, run in a worker process;
- `pool`: the bounded process pool that runs `render` off the proxy's event loop.

This package imports no other swiftlite package and no HTTP stack: the proxy's `image`
feature (swiftlite/proxy/middleware/image_variants.py) drives it.
"""
