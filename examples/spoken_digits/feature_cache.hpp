// Spoken-digits example: log-mel features of many utterances, cached in one file so that a second
// run skips the audio and the FFTs.
#pragma once

#include <string>
#include <vector>

#include "features.hpp"
#include "manifest.hpp"

namespace spoken_digits {

// The features of `utterances`, in order: read from cache_path when the file was written for
// the same manifest (manifest_text, the manifest file's bytes), the same number of utterances and
// the same front-end constants; otherwise computed with compute_features and written there (a
// cache that cannot be written is a warning on stderr, not an error).
std::vector<Features> cached_features(const std::string& cache_path,
                                      const std::string& manifest_text,
                                      const std::vector<const Utterance*>& utterances);

}  // namespace spoken_digits
