"""Read the stored fields of a Lucene 9 segment (``Lucene90StoredFieldsFastData``) with the standard library only.

WebShop-minimal ships its 1,000-product catalogue only inside a pyserini/Lucene 9.5 index built with
``--storeRaw``; this reads each document's stored fields back from the segment's ``.fnm`` (field names, format
``Lucene94FieldInfos``), ``.fdm`` (chunk size, document count) and ``.fdt`` (the documents, in chunks compressed
with LZ4 over a preset dictionary: ``LZ4WithPresetDictCompressionMode``). Anything else (another codec or
version, a sliced chunk layout it does not know, a bad checksum) is an error naming the file, never a guess.

    docs = stored_documents(read("_1.fnm"), read("_1.fdm"), read("_1.fdt"))   # [{"id": ..., "raw": ...}, ...]
"""

from __future__ import annotations

import struct
import zlib

CODEC_MAGIC, FOOTER_MAGIC = 0x3FD76C17, 0xC02893E8 - (1 << 32)
STRING, BYTE_ARR, INT, FLOAT, LONG, DOUBLE = range(6)


class LuceneFormatError(ValueError):
    """A segment file this reader does not understand (or a damaged one)."""


class _In:
    """A cursor over bytes with Lucene's DataInput encodings (little-endian fixed width since Lucene 9)."""

    def __init__(self, data: bytes, name: str, pos: int = 0) -> None:
        self.data, self.name, self.pos = data, name, pos

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def bytes(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise LuceneFormatError(f"{self.name}: truncated at byte {self.pos} (wanted {n} more)")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def vint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if b < 0x80:
                return out
            shift += 7

    def le(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.bytes(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.bytes(self.vint()).decode("utf-8")

    def header(self, codec: str, versions: range) -> int:
        """CodecUtil's index header: magic, codec name, version, segment id, suffix. Returns the version."""
        magic, = struct.unpack(">i", self.bytes(4))
        name = self.string()
        version, = struct.unpack(">i", self.bytes(4))
        if magic != CODEC_MAGIC or name != codec or version not in versions:
            raise LuceneFormatError(f"{self.name}: codec {name!r} version {version}, this reader knows {codec!r} "
                                    f"versions {list(versions)}")
        self.bytes(16)
        self.bytes(self.byte())
        return version


def _check_footer(data: bytes, name: str) -> None:
    if len(data) < 16:
        raise LuceneFormatError(f"{name}: too short for a Lucene file")
    magic, algo, checksum = struct.unpack(">iiq", data[-16:])
    if magic != FOOTER_MAGIC or algo != 0 or checksum != zlib.crc32(data[:-8]):
        raise LuceneFormatError(f"{name}: bad footer or CRC32 checksum (damaged file)")


def field_names(fnm: bytes) -> dict[int, str]:
    """``{field number: name}`` from a ``Lucene94FieldInfos`` file (version 0, Lucene 9.4-9.8)."""
    _check_footer(fnm, ".fnm")
    r = _In(fnm, ".fnm")
    r.header("Lucene94FieldInfos", range(0, 1))
    names = {}
    for _ in range(r.vint()):
        name = r.string()
        number = r.vint()
        r.bytes(3 + 8)  # bits, index options, doc-values type; doc-values generation (long)
        for _ in range(2 * r.vint()):  # attributes: key, value
            r.string()
        if r.vint():  # point dimension count, then index dimension count and bytes per dimension
            r.vint(), r.vint()
        r.vint(), r.bytes(2)  # vector dimension, encoding, similarity
        names[number] = name
    return names


def lz4_decompress(r: _In, length: int, out: bytearray) -> None:
    """Append ``length`` bytes decoded from Lucene's LZ4 block format to ``out`` (whose tail is the dictionary)."""
    end = len(out) + length
    while True:
        token = r.byte()
        lit = token >> 4
        if lit == 0x0F:
            while (b := r.byte()) == 0xFF:
                lit += 0xFF
            lit += b
        out += r.bytes(lit)
        if len(out) >= end:
            break
        dist = r.le("H")
        n = token & 0x0F
        if n == 0x0F:
            while (b := r.byte()) == 0xFF:
                n += 0xFF
            n += b
        n += 4
        if not 0 < dist <= len(out):
            raise LuceneFormatError(f"{r.name}: LZ4 match offset {dist} outside the {len(out)} bytes decoded")
        start = len(out) - dist
        if dist >= n:
            out += out[start:start + n]
        else:  # overlapping copy: the last ``dist`` bytes repeat
            out += (out[start:] * (n // dist + 1))[:n]
    if len(out) != end:
        raise LuceneFormatError(f"{r.name}: LZ4 block decoded to {len(out) - end + length} bytes, expected {length}")


def _decompress_preset_dict(r: _In, length: int) -> bytes:
    """One ``LZ4WithPresetDictCompressionMode`` stream: dictionary, then sub-blocks each decoded after it."""
    dict_len, block_len = r.vint(), r.vint()
    r.vint()  # compressed length of the dictionary
    n_blocks, total = 0, dict_len
    while total < length:
        r.vint()  # compressed length of each sub-block (the decoder knows where each ends)
        n_blocks, total = n_blocks + 1, total + block_len
    dictionary = bytearray()
    lz4_decompress(r, dict_len, dictionary)
    out = bytearray(dictionary)
    for i in range(n_blocks):
        buf = bytearray(dictionary)
        lz4_decompress(r, min(block_len, length - dict_len - i * block_len), buf)
        out += buf[dict_len:]
    return bytes(out)


def _ints(r: _In, n: int) -> list[int]:
    """``StoredFieldsInts``: one vint when n == 1, else a width byte (0: all equal, 8/16/32: packed)."""
    if n == 1:
        return [r.vint()]
    width = r.byte()
    if width == 0:
        return [r.vint()] * n
    if width not in (8, 16, 32):
        raise LuceneFormatError(f"{r.name}: unknown packed-ints width {width}")
    fmt, per_long = {8: ("B", 8), 16: ("H", 4), 32: ("I", 2)}[width]
    out, k = [0] * n, 0
    while k + 128 <= n:  # blocks of 128: long i holds values i, i+16, ... (8 bits), big end first
        for i in range(128 // per_long):
            word = r.le("Q")
            for j in range(per_long):
                out[k + i + j * (128 // per_long)] = (word >> (64 - width * (j + 1))) & ((1 << width) - 1)
        k += 128
    for i in range(k, n):
        out[i] = r.le(fmt)
    return out


def _field(r: _In, names: dict[int, str]) -> tuple[str, object]:
    bits = r.vint()
    number, kind = bits >> 3, bits & 7
    if kind == STRING:
        value: object = r.string()
    elif kind == BYTE_ARR:
        value = r.bytes(r.vint())
    else:
        raise LuceneFormatError(f"{r.name}: stored field {names.get(number, number)} has type {kind}; only strings "
                                f"and bytes are read")
    return names.get(number, str(number)), value


def stored_documents(fnm: bytes, fdm: bytes, fdt: bytes) -> list[dict[str, object]]:
    """Every document's stored fields, in document order, as ``{field name: value}``."""
    names = field_names(fnm)
    for data, name in ((fdm, ".fdm"), (fdt, ".fdt")):
        _check_footer(data, name)
    meta = _In(fdm, ".fdm")
    meta.header("Lucene90FieldsIndexMeta", range(1, 2))
    chunk_size, n_docs = meta.vint(), meta.le("i")
    r = _In(fdt, ".fdt")
    r.header("Lucene90StoredFieldsFastData", range(1, 2))
    docs: list[dict[str, object]] = []
    while len(docs) < n_docs:
        if r.vint() != len(docs):
            raise LuceneFormatError(f".fdt: chunk at byte {r.pos} does not start at document {len(docs)}")
        token = r.vint()
        n, sliced = token >> 2, token & 1
        fields, lengths = _ints(r, n), _ints(r, n)
        total = sum(lengths)
        if sliced:
            body = b"".join(_decompress_preset_dict(r, min(chunk_size, total - s)) for s in range(0, total, chunk_size))
        else:
            body = _decompress_preset_dict(r, total)
        doc_in = _In(body, ".fdt chunk")
        for count in fields:
            docs.append(dict(_field(doc_in, names) for _ in range(count)))
    if r.pos != len(fdt) - 16:
        raise LuceneFormatError(f".fdt: {len(fdt) - 16 - r.pos} bytes left after {n_docs} documents")
    return docs
