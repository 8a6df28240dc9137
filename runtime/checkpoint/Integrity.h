// What makes a checkpoint trustworthy beyond its shard files' CRC32s: a checksum over meta.json
// itself, and the fingerprint of the model that saved it, compared with the loading run's.
//
// meta.json ends with "meta_crc32": the CRC32 of the file's text with that value written as
// "00000000". A fingerprint records the model (its canonical description), a hash of its
// canonical forward IR and every parameter's name and global shape; none of these depend on the
// layout or the precision, so a checkpoint still loads under another layout or precision.
#pragma once

#include "support/Json.h"
#include "support/Status.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace megac::runtime::checkpoint {

/// The model a checkpoint belongs to.
struct ModelFingerprint {
  std::string model;     // canonical description, for messages ("gpt:layers=2,hidden=64,...")
  std::string graphHash; // 16 hex digits over the canonical forward IR
  std::map<std::string, std::vector<int64_t>> parameters; // name -> global shape
};

/// `text` (a JSON object) with "meta_crc32" set as its last member (replaced when present).
std::string sealMeta(std::string text);
/// Checks the "meta_crc32" of meta.json's `text`; a file without one (written before megac
/// sealed them) passes. An error names `path`.
Status verifyMetaSeal(std::string_view text, const std::string &path);

/// The fingerprint as a JSON object's text.
std::string fingerprintJson(const ModelFingerprint &fingerprint);
/// A fingerprint read back from meta.json's "model_fingerprint"; an error names `where`.
StatusOr<ModelFingerprint> parseFingerprint(const json::Value &value, const std::string &where);
/// Empty when a run of `run` may load the parameters `saved` describes; else what differs, in
/// one line ("the checkpoint has parameters this model lacks: h1.attn.q.weight and 15 more").
std::string fingerprintMismatch(const ModelFingerprint &saved, const ModelFingerprint &run);

} // namespace megac::runtime::checkpoint
