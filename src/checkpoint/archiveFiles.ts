/**
 * A checkpoint's small text files (config.json, tokenizer.json, ...) read straight from its zip
 * archive, without the addon: so the tokenizer can be built while the addon and libtorch load
 * (TorchEngine.load). Only a best effort: anything unexpected gives undefined, and the addon's
 * own reading of the archive stays the authority (its errors, its validation).
 *
 * A TorchScript archive is a zip whose entries all sit under one folder (the archive's name);
 * extra files are `<name>/extra/<file>`. torch writes them stored (uncompressed); deflated
 * entries are inflated.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { inflateRawSync } from "node:zlib";

const END_OF_DIRECTORY = 0x06054b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_END = 0x06064b50;
const DIRECTORY_ENTRY = 0x02014b50;
const LOCAL_HEADER = 0x04034b50;
/** Entries larger than this are not read here (a tokenizer.json is a few MB). */
const MAX_ENTRY_BYTES = 64 << 20;

function readAt(fd: number, offset: number, length: number): Buffer | undefined {
  const out = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, out, done, length - done, offset + done);
    if (n <= 0) return undefined;
    done += n;
  }
  return out;
}

/** The 64-bit little-endian value at `at`, where it fits a JS number exactly. */
function u64(buf: Buffer, at: number): number {
  const value = buf.readBigUInt64LE(at);
  return value > BigInt(Number.MAX_SAFE_INTEGER) ? NaN : Number(value);
}

/** The zip64 extra field's values, in the order the fields that hold 0xffffffff ask for them. */
function zip64Values(extra: Buffer): number[] {
  for (let at = 0; at + 4 <= extra.length; ) {
    const id = extra.readUInt16LE(at), size = extra.readUInt16LE(at + 2);
    if (id === 0x0001) {
      const values: number[] = [];
      for (let v = at + 4; v + 8 <= at + 4 + size && v + 8 <= extra.length; v += 8) values.push(u64(extra, v));
      return values;
    }
    at += 4 + size;
  }
  return [];
}

interface DirectoryEntry {
  name: string;
  method: number;
  compressed: number;
  uncompressed: number;
  local: number;
}

/** The zip's central directory, with zip64 values filled in; undefined where it is not one this reads. */
function readDirectory(fd: number, size: number): DirectoryEntry[] | undefined {
  if (size < 22) return undefined;
  const tailLength = Math.min(size, 22 + 65535);
  const tail = readAt(fd, size - tailLength, tailLength);
  if (!tail) return undefined;
  let end = -1;
  for (let i = tailLength - 22; i >= 0; i--) {
    if (tail.readUInt32LE(i) === END_OF_DIRECTORY) {
      end = i;
      break;
    }
  }
  if (end < 0) return undefined;
  let count = tail.readUInt16LE(end + 10);
  let directorySize = tail.readUInt32LE(end + 12);
  let directoryOffset = tail.readUInt32LE(end + 16);
  if (count === 0xffff || directorySize === 0xffffffff || directoryOffset === 0xffffffff) {
    if (end < 20 || tail.readUInt32LE(end - 20) !== ZIP64_LOCATOR) return undefined;
    const record = readAt(fd, u64(tail, end - 20 + 8), 56);
    if (!record || record.readUInt32LE(0) !== ZIP64_END) return undefined;
    count = u64(record, 32);
    directorySize = u64(record, 40);
    directoryOffset = u64(record, 48);
  }
  if (!(directorySize > 0) || directorySize > 64 << 20 || !(directoryOffset + directorySize <= size)) return undefined;
  const directory = readAt(fd, directoryOffset, directorySize);
  if (!directory) return undefined;

  const entries: DirectoryEntry[] = [];
  for (let at = 0, i = 0; i < count && at + 46 <= directory.length; i++) {
    if (directory.readUInt32LE(at) !== DIRECTORY_ENTRY) return undefined;
    const method = directory.readUInt16LE(at + 10);
    let compressed = directory.readUInt32LE(at + 20);
    let uncompressed = directory.readUInt32LE(at + 24);
    const nameLength = directory.readUInt16LE(at + 28), extraLength = directory.readUInt16LE(at + 30);
    const commentLength = directory.readUInt16LE(at + 32);
    let local = directory.readUInt32LE(at + 42);
    const name = directory.toString("utf8", at + 46, at + 46 + nameLength);
    const extra = directory.subarray(at + 46 + nameLength, at + 46 + nameLength + extraLength);
    at += 46 + nameLength + extraLength + commentLength;
    const values = zip64Values(extra);
    let next = 0;
    if (uncompressed === 0xffffffff) uncompressed = values[next++] ?? NaN;
    if (compressed === 0xffffffff) compressed = values[next++] ?? NaN;
    if (local === 0xffffffff) local = values[next++] ?? NaN;
    entries.push({ name, method, compressed, uncompressed, local });
  }
  return entries;
}

/** Opens `path` for `read`, which gets the descriptor and the file's size; undefined on any failure. */
function withFile<T>(path: string, read: (fd: number, size: number) => T | undefined): T | undefined {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return undefined;
  }
  try {
    return read(fd, fstatSync(fd).size);
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

/** Up to the first `length` bytes of the file at `path`; undefined where it cannot be read. */
export function readFileHead(path: string, length: number): Buffer | undefined {
  return withFile(path, (fd) => {
    const out = Buffer.alloc(length);
    return out.subarray(0, readSync(fd, out, 0, length, 0));
  });
}

/** The names of the zip archive's entries at `path`; undefined where it is not a zip this reads. */
export function readArchiveEntryNames(path: string): string[] | undefined {
  return withFile(path, (fd, size) => readDirectory(fd, size)?.map((entry) => entry.name));
}

/**
 * The named extra files of the TorchScript archive at `path`, as UTF-8 text (a name absent from
 * the archive is absent from the result); undefined where the file is not an archive this reads.
 */
export function readArchiveExtraFiles(path: string, names: readonly string[]): Record<string, string> | undefined {
  return withFile(path, (fd, size) => {
    const entries = readDirectory(fd, size);
    if (!entries) return undefined;
    const wanted = new Set(names);
    const found: Record<string, string> = {};
    const folder = entries[0]?.name.split("/")[0];
    const prefix = `${folder}/extra/`;
    for (const { name, method, compressed, uncompressed, local } of entries) {
      if (!name.startsWith(prefix) || !wanted.has(name.slice(prefix.length))) continue;
      if (!(uncompressed <= MAX_ENTRY_BYTES) || !(compressed <= MAX_ENTRY_BYTES) || !(local + 30 <= size)) return undefined;
      const header = readAt(fd, local, 30);
      if (!header || header.readUInt32LE(0) !== LOCAL_HEADER) return undefined;
      const dataAt = local + 30 + header.readUInt16LE(26) + header.readUInt16LE(28);
      if (dataAt + compressed > size) return undefined;
      const data = compressed === 0 ? Buffer.alloc(0) : readAt(fd, dataAt, compressed);
      if (!data) return undefined;
      let bytes: Buffer;
      if (method === 0) bytes = data;
      else if (method === 8) bytes = inflateRawSync(data, { maxOutputLength: MAX_ENTRY_BYTES });
      else return undefined;
      if (bytes.length !== uncompressed) return undefined;
      found[name.slice(prefix.length)] = bytes.toString("utf8");
    }
    return found;
  });
}
