"""Derived data files rebuild from their public sources: the joblib and Lucene readers on small synthetic inputs of
the same formats (hand-encoded here, so no pandas, joblib or Java), the fetch → convert → verify path through a
loopback server, and, when the real source files are at hand (TALENTRL_DATA_SOURCES, the raw-file layout
``<repo>/<revision>/<path>``), byte identity with the mirror."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import pickle
import pickletools
import struct
import threading
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from talentrl_core import benchdata, benchdata_derive, benchdata_fetch, joblib_frame, lucene_stored

# ---- a joblib-pickled pandas DataFrame, encoded opcode by opcode (what pandas 1.x + joblib wrote) ----


def _value(v) -> bytes:
    """The opcodes that push a plain value (no PROTO, no STOP)."""
    return pickletools.optimize(pickle.dumps(v, protocol=2))[2:-1]


def _global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def _call(fn: bytes, *args: bytes) -> bytes:
    return fn + b"(" + b"".join(args) + b"tR"


def _build(obj: bytes, state: bytes) -> bytes:
    return obj + state + b"b"


def _dict(items: dict) -> bytes:
    return b"}(" + b"".join(_value(k) + v for k, v in items.items()) + b"u"


def _dtype(code: str, order: str) -> bytes:
    return _build(_call(_global("numpy", "dtype"), _value(code), _value(False), _value(True)),
                  _value((3, order, None, None, None, -1, -1, 63 if code == "O8" else 0)))


def _ndarray(shape: tuple, dtype: bytes, data: bytes) -> bytes:
    """numpy's own pickle of an array: _reconstruct(ndarray, (0,), b'b') then BUILD (1, shape, dtype, F, data)."""
    obj = _call(_global("numpy.core.multiarray", "_reconstruct"), _global("numpy", "ndarray"), _value((0,)),
                _call(_global("_codecs", "encode"), _value("b"), _value("latin1")))
    return _build(obj, b"(" + _value(1) + _value(shape) + dtype + _value(False) + data + b"t")


def _wrapper(shape: tuple, dtype: bytes) -> bytes:
    state = _dict({"subclass": _global("numpy", "ndarray"), "shape": _value(shape), "order": _value("C"),
                   "dtype": dtype, "allow_mmap": _value(False), "numpy_array_alignment_bytes": _value(16)})
    return _build(_global("joblib.numpy_pickle", "NumpyArrayWrapper") + b")\x81", state)


def _int64s(values: list[int]) -> bytes:
    raw = struct.pack(f"<{len(values)}q", *values).decode("latin1")
    return _call(_global("_codecs", "encode"), _value(raw), _value("latin1"))


def synthetic_joblib(rows: list[dict], index: list[int]) -> bytes:
    """A joblib file of a DataFrame whose columns are all object (one block), as reflexion's sample is."""
    cols = list(rows[0])
    cells = [[r[c] for r in rows] for c in cols]

    def obj(v) -> bytes:  # a cell: lists of str become object arrays, lists of int int64 arrays (as pandas held them)
        if isinstance(v, dict):
            return _dict({k: obj(x) for k, x in v.items()})
        if isinstance(v, list) and all(isinstance(x, int) for x in v) and v:
            return _ndarray((len(v),), _dtype("i8", "<"), _int64s(v))
        if isinstance(v, list):
            return _ndarray((len(v),), _dtype("O8", "|"), b"](" + b"".join(obj(x) for x in v) + b"e")
        return _value(v)

    def object_array(shape: tuple, flat: list) -> bytes:  # joblib: wrapper, then a nested protocol-2 pickle
        nested = _ndarray(shape, _dtype("O8", "|"), b"](" + b"".join(obj(x) for x in flat) + b"e")
        return _wrapper(shape, _dtype("O8", "|")) + b"\x80\x02" + nested + b"."

    flat = [x for col in cells for x in col]
    block = _call(_global("pandas._libs.internals", "_unpickle_block"), object_array((len(cols), len(rows)), flat),
                  _call(_global("builtins", "slice"), _value(0), _value(len(cols)), _value(1)), _value(2))
    columns = _call(_global("pandas.core.indexes.base", "_new_Index"), _global("pandas.core.indexes.base", "Index"),
                    _dict({"data": object_array((len(cols),), cols), "name": _value(None)}))
    raw_index = _wrapper((len(index),), _dtype("i8", "<")) + bytes([3]) + b"\0" * 3 + struct.pack(f"<{len(index)}q", *index)
    row_index = _call(_global("pandas.core.indexes.base", "_new_Index"),
                      _global("pandas.core.indexes.numeric", "Int64Index"), _dict({"data": raw_index, "name": _value(None)}))
    mgr = _call(_global("pandas.core.internals.managers", "BlockManager"), b"(" + block + b"t",
                b"](" + columns + row_index + b"e")
    frame = _build(_global("pandas.core.frame", "DataFrame") + b")\x81", _dict({"_mgr": mgr, "_typ": _value("dataframe")}))
    return b"\x80\x02" + frame + b"."


ROWS = [{"id": "a1", "question": "Où est Zürich?", "supporting_facts": {"title": ["Zürich", "Swiss"], "sent_id": [0, 2]},
         "context": {"title": ["Zürich"], "sentences": [["Zürich is a city.", " It is Swiss."]]}, "level": "hard"},
        {"id": "b2", "question": "Q2", "supporting_facts": {"title": ["X"], "sent_id": [1]},
         "context": {"title": ["X", "Y"], "sentences": [["x0", "x1"], ["y0"]]}, "level": "hard"}]


def test_joblib_frame_reads_a_synthetic_dataframe_row_by_row():
    data = synthetic_joblib(ROWS, index=[4367, 1867])
    assert joblib_frame.rows(joblib_frame.load(data)) == ROWS
    out = benchdata_derive.hotpotqa_from_joblib({"x.joblib": data})
    assert out == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS).encode()
    assert "Zürich".encode() in out  # UTF-8, not \u escapes


def test_joblib_frame_refuses_any_other_global_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    evil = b"\x80\x02" + _call(_global("os", "system"), _value(f"touch {marker}")) + b"."
    with pytest.raises(pickle.UnpicklingError, match="os.system is not allowed"):
        joblib_frame.load(evil)
    assert not marker.exists()


# ---- a Lucene 9 segment's stored fields, encoded by hand (literal-only LZ4 plus one chunk with matches) ----


def _vint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _string(s: str) -> bytes:
    b = s.encode()
    return _vint(len(b)) + b


def _header(codec: str, version: int) -> bytes:
    return struct.pack(">i", lucene_stored.CODEC_MAGIC) + _string(codec) + struct.pack(">i", version) + b"\1" * 16 + b"\0"


def _footer(body: bytes) -> bytes:
    body += struct.pack(">ii", lucene_stored.FOOTER_MAGIC, 0)
    return body + struct.pack(">q", zlib.crc32(body))


def _literals(data: bytes) -> bytes:
    """An LZ4 block holding ``data`` as one literal run."""
    n = len(data)
    token = bytes([min(n, 15) << 4])
    ext = b"" if n < 15 else b"\xff" * ((n - 15) // 255) + bytes([(n - 15) % 255])
    return token + ext + data


def _chunk(doc_base: int, docs: list[bytes], fields: list[int]) -> bytes:
    body = b"".join(docs)
    dict_len = len(body) // 160
    block_len = (len(body) - dict_len + 9) // 10
    blocks = [_literals(body[:dict_len])] + [_literals(body[s:s + block_len]) for s in range(dict_len, len(body), block_len)]
    ints = lambda vs: _vint(vs[0]) if len(vs) == 1 else b"\x10" + b"".join(struct.pack("<H", v) for v in vs)  # noqa: E731
    return (_vint(doc_base) + _vint(len(docs) << 2) + ints(fields) + ints([len(d) for d in docs]) + _vint(dict_len)
            + _vint(block_len) + b"".join(_vint(len(b)) for b in blocks) + b"".join(blocks))


def synthetic_segment(raws: list[str]) -> dict[str, bytes]:
    fnm = _header("Lucene94FieldInfos", 0) + _vint(2)
    for number, name in enumerate(["id", "raw"]):
        fnm += _string(name) + _vint(number) + b"\0\0\0" + b"\xff" * 8 + _vint(0) + _vint(0) + _vint(0) + b"\1\0"
    docs = [b"\x00" + _string(json.loads(r)["id"]) + b"\x08" + _string(r) for r in raws]
    fdt = _header("Lucene90StoredFieldsFastData", 1) + _chunk(0, docs[:2], [2, 2]) + _chunk(2, docs[2:], [2])
    fdm = _header("Lucene90FieldsIndexMeta", 1) + _vint(81920) + struct.pack("<i", len(raws)) + b"\0" * 8
    return {"seg/_1.fnm": _footer(fnm), "seg/_1.fdm": _footer(fdm), "seg/_1.fdt": _footer(fdt), "seg/_1.fdx": b"idx"}


PRODUCTS = [{"id": "B0", "contents": "café table", "product": {"name": "Café Table", "pricing": [877.8]}},
            {"id": "B1", "contents": "lamp", "product": {"name": "Lamp", "pricing": [], "options": {}}},
            {"id": "B2", "contents": "x" * 300, "product": {"name": "Long", "pricing": [1.5, 2.0]}}]


def test_lucene_stored_fields_decode_a_synthetic_segment():
    raws = [json.dumps(p, indent=2, ensure_ascii=False) for p in PRODUCTS]  # Lucene keeps raw pretty-printed
    seg = synthetic_segment(raws)
    docs = lucene_stored.stored_documents(seg["seg/_1.fnm"], seg["seg/_1.fdm"], seg["seg/_1.fdt"])
    assert docs == [{"id": p["id"], "raw": r} for p, r in zip(PRODUCTS, raws)]
    out = benchdata_derive.webshop_from_lucene(seg)
    assert out.decode().splitlines() == [json.dumps(p, ensure_ascii=False) for p in PRODUCTS]
    damaged = bytearray(seg["seg/_1.fdt"])
    damaged[60] ^= 1
    with pytest.raises(lucene_stored.LuceneFormatError, match="CRC32"):
        lucene_stored.stored_documents(seg["seg/_1.fnm"], seg["seg/_1.fdm"], bytes(damaged))


def test_lz4_matches_reach_into_the_preset_dictionary_and_overlap():
    # after the dictionary "abcdef": literals "cd" + a 4-byte match 6 back (into the dictionary: "cdef"); literals
    # "xy" + an 8-byte match 2 back (overlapping: "xyxyxyxy"); last literals "z"
    block = (bytes([0x20]) + b"cd" + struct.pack("<H", 6) + bytes([0x24]) + b"xy" + struct.pack("<H", 2)
             + bytes([0x10]) + b"z")
    out = bytearray(b"abcdef")
    lucene_stored.lz4_decompress(lucene_stored._In(block, "t"), 17, out)
    assert bytes(out) == b"abcdef" + b"cdcdef" + b"xy" + b"xyxyxyxy" + b"z"
    with pytest.raises(lucene_stored.LuceneFormatError, match="match offset 99"):
        lucene_stored.lz4_decompress(lucene_stored._In(bytes([0x10]) + b"a" + struct.pack("<H", 99), "t"), 9,
                                     bytearray())


# ---- fetch → convert → verify, through a loopback server standing in for GitHub ----


def _serve(directory: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/{{repo}}/{{revision}}/{{path}}"


def _entry_for(path: str, sources: dict[str, bytes], expected: bytes) -> benchdata.Entry:
    real = next(e for e in benchdata.load_manifest() if e.path == path)
    srcs = tuple(benchdata.Source(p, hashlib.sha256(d).hexdigest(), len(d)) for p, d in sources.items())
    return replace(real, sources=srcs, sha256=hashlib.sha256(expected).hexdigest(), size=len(expected))


def _publish(root: Path, e: benchdata.Entry, sources: dict[str, bytes]) -> None:
    for p, d in sources.items():
        f = root / e.repo / e.revision / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(d)


@pytest.mark.parametrize("path", sorted(benchdata_derive.CONVERTERS))
def test_fetch_rebuilds_a_derived_file_from_its_verified_sources(tmp_path, path):
    if path.startswith("webshop/"):
        sources = synthetic_segment([json.dumps(p, indent=2) for p in PRODUCTS])
        expected = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PRODUCTS).encode()
    else:
        sources = {"hotpotqa_runs/data/sample.joblib": synthetic_joblib(ROWS, [1, 2])}
        expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS).encode()
    e = _entry_for(path, sources, expected)
    _publish(tmp_path / "github", e, sources)
    server, url = _serve(tmp_path / "github")
    try:
        out = benchdata_fetch.fetch(e, tmp_path / "data", raw_url=url)
        assert out.read_bytes() == expected and out == tmp_path / "data" / path
        first = next(iter(sources))
        (tmp_path / "github" / e.repo / e.revision / first).write_bytes(b"tampered")
        with pytest.raises(benchdata.DataCorrupt, match=f"source {e.repo}@.*{first}.*sha256"):
            benchdata_fetch.fetch(e, tmp_path / "data2", raw_url=url)
        with pytest.raises(benchdata.DataCorrupt, match="converted from .* sha256"):  # a converter that drifts
            benchdata_derive.convert(replace(e, sha256="0" * 64), sources)
    finally:
        server.shutdown()
    assert not (tmp_path / "data2" / path).exists()


def test_every_derived_entry_has_a_converter_and_pinned_sources():
    derived = [e for e in benchdata.load_manifest() if e.kind == "derived"]
    assert {e.path for e in derived} == set(benchdata_derive.CONVERTERS)
    for e in derived:
        assert e.sources and all(len(s.sha256) == 64 and s.size > 0 for s in e.sources)
        assert e.source_path in {s.path for s in e.sources}


SOURCES = os.environ.get("TALENTRL_DATA_SOURCES")


@pytest.mark.skipif(not SOURCES, reason="set TALENTRL_DATA_SOURCES to a folder of the real source files "
                                        "(<repo>/<revision>/<path>) to check byte identity with the mirror")
def test_converters_reproduce_the_mirror_byte_for_byte(tmp_path):
    assert benchdata_derive.main([SOURCES, str(tmp_path)]) == 0
    for path in benchdata_derive.CONVERTERS:
        e = next(x for x in benchdata.load_manifest() if x.path == path)
        assert benchdata.sha256(tmp_path / path) == e.sha256
