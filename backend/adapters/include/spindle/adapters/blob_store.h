#pragma once
// Content-addressed blob store: immutable files named by the SHA-256 of their bytes, under
// <root>/<first two hex digits>/<64 hex digits>. Identical content is stored once.
//
// Durability: put() writes a temp file in the fan-out directory, fsyncs it, renames it into
// place and fsyncs the directory (write_file_atomic); a new fan-out directory is fsynced
// into <root> before use. When put() returns, the blob survives a crash or power loss.
// get() re-hashes every read and refuses content whose digest is not its name (data_loss).
// put() of content already present compares the stored bytes first and rewrites a damaged
// copy, so re-committing repairs a corrupt blob.
//
// Disk full: every errno of a write path (mkdir, lock file, temp file, write, fsync, close,
// rename) that is ENOSPC or EDQUOT throws `resource` naming the path; the temp file is removed,
// so a failed put() leaves no partial blob under the blob's name and gives its space back.
//
// GC protocol (gc() against put() and against a commit in flight):
//  1. gc() first touches <root>/.gc-clock and takes that file's mtime as its start time, so
//     "before GC started" is judged by the same (coarse) filesystem clock that stamps blobs.
//     The cutoff is start - grace; only files with mtime strictly before it are candidates.
//  2. put() of content already present refreshes the blob's mtime instead of rewriting it,
//     so a re-used orphan counts as freshly written.
//  3. put()'s "exists? refresh : write" and gc()'s "stat, still old? unlink" each run under
//     <root>/.lock (put: shared flock, gc: exclusive flock per deletion), so they never
//     interleave: either put's refresh lands before gc's stat (gc keeps it) or after gc's
//     unlink (put writes the file anew).
//  4. A commit is "put() then insert a row that references the blob". A blob put less than
//     `grace` before GC started is never deleted, so a commit that finishes within `grace`
//     of its put() cannot lose its blob. A caller that can serialise "is_referenced + unlink"
//     against "check blob exists + insert row" (the catalog does, with its write
//     transaction: BlobGcOptions::run_batch) is safe even with grace = 0.
// Temp files left by a crash (".<id>.tmp-XXXXXX" in fan-out directories, ".put.tmp-XXXXXX" of
// put_stream in <root>) are removed by gc() under the same cutoff. No lock covers a temp file
// while it is written, so a grace shorter than a put (grace 0: "everything unreferenced is a
// crash's leftover") can take one in flight: that put then fails with an error naming the
// store, and nothing acknowledged is lost.
//
// Thread-safety: every method may be called from any number of threads and processes at
// once; the object holds no mutable state.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "spindle/adapters/revision_format.h"

namespace spindle::adapters {

struct BlobGcOptions {
  // Files with mtime >= (gc start - grace) are kept. Must exceed the longest put -> commit
  // window of any writer that does not serialise with run_batch.
  std::chrono::seconds grace{std::chrono::hours(1)};
  // Runs one batch of "is_referenced? unlink" steps (one fan-out directory). Default: calls
  // it directly. The catalog wraps each batch in its write transaction.
  std::function<void(const std::function<void()>& batch)> run_batch;
};

struct BlobGcReport {
  uint64_t scanned = 0;       // blob files looked at
  uint64_t referenced = 0;    // kept: is_referenced said yes
  uint64_t young = 0;         // kept: newer than the cutoff
  uint64_t deleted = 0;       // unreferenced blobs removed
  uint64_t bytes_freed = 0;   // their total size
  uint64_t temp_removed = 0;  // stale temp files removed
  uint64_t foreign = 0;       // files that are not blobs; left alone
};

// A blob's bytes as a stream: produce(write) calls write(data, n) with consecutive pieces of
// the content. put_stream calls it twice, on two threads at once (one pass writes, the other
// hashes), so it must emit the same bytes every time and only read shared state.
using BlobWrite = std::function<void(const void* data, size_t n)>;
using BlobProducer = std::function<void(const BlobWrite& write)>;

struct BlobPut {
  std::string id;      // the SHA-256 of the content
  uint64_t bytes = 0;  // its size
};

class BlobStore {
 public:
  // Creates `root` (and parents) if missing.
  explicit BlobStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }

  // Stores `bytes` and returns their SHA-256 (64 lowercase hex). Durable before returning.
  // Throws resource (disk full, quota) or io, naming the path. Cost when already stored: one
  // read of the stored copy (compared, not re-hashed) instead of a write and two fsyncs.
  std::string put(std::string_view bytes) const;
  // The same contract for content that is never held in memory at once: written to a temp
  // file in <root> with O_DIRECT (WriteMode::direct: no page-cache copy; a revision is read
  // back from the memory tiers, rarely from its file) while a second thread hashes it (so
  // hashing overlaps the disk's work), fsynced, then renamed to its name and the fan-out
  // directory fsynced.
  // Content already present and intact (re-hashed) is kept and its mtime refreshed; the temp
  // file is removed; on a full disk such content is still a success, as with put(). Stale
  // temp files of a crashed put are gc()'s, as in fan-out directories.
  // on_written (optional, must not throw) is called on the calling thread once every byte is
  // handed to the temp file's sink (the direct write's last staged chunk, up to 4 MiB, is
  // written after it, so its errors come after the cue), before the fsync and before the hash
  // may be done: a caller's cue
  // to start work that should not compete with the write for the CPU (save_weights publishes
  // its snapshot into a serving slot then).
  BlobPut put_stream(const BlobProducer& produce,
                     const std::function<void()>& on_written = {}) const;

  // The blob's bytes, verified: throws not_found (no such blob), data_loss (content does not
  // hash to `id`, naming the blob and its path), invalid_argument (malformed id).
  std::string get(std::string_view id) const;
  // The blob decoded as a policy revision (read_revision_file: each tensor read straight into
  // its memory, the digest taken on the way, never the whole blob in memory at once), verified
  // as get() is: not_found, data_loss (also when a corrupt blob fails to decode), or
  // decode_revision's format errors naming `source` for an intact blob that is no revision.
  DecodedRevision get_revision(std::string_view id, const std::string& source) const;

  bool exists(std::string_view id) const;
  // File size, or nullopt when absent.
  std::optional<uint64_t> size_of(std::string_view id) const;
  // Where the blob lives (whether or not it exists). Throws invalid_argument on a bad id.
  std::filesystem::path path_of(std::string_view id) const;

  // Deletes one blob now, whatever its age (under <root>/.lock exclusively, like gc()'s
  // unlink, so it never interleaves with a put()). Returns its size, or nullopt when it was
  // absent. The caller must know nothing references it, and serialise "is it referenced? ->
  // remove" against "blob present? -> insert a reference" (the catalog's collect_expired
  // does both inside its write transaction, as gc() does with run_batch).
  std::optional<uint64_t> remove(std::string_view id) const;

  // Deletes unreferenced blobs and stale temp files older than the cutoff (protocol above).
  // is_referenced(id) is called for old blobs only, inside run_batch.
  BlobGcReport gc(const std::function<bool(std::string_view id)>& is_referenced,
                  const BlobGcOptions& options = {}) const;

 private:
  std::filesystem::path root_;
};

}  // namespace spindle::adapters
