// The cache file, in native byte order (a local speed-up, not an interchange format):
//   magic "SDIGFEA1" (8 bytes), then uint64 each: mel bands, window ms, hop ms, the FNV-1a hash
//   of manifest.tsv, utterance count; then per utterance int64 frames and frames * bands floats.
// The manifest's hash ties the cache to the data set (make_data.sh is deterministic, so the same
// manifest means the same audio), the front end's constants to the feature code; anything else
// and the cache is recomputed.

#include "feature_cache.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace spoken_digits {

namespace {

constexpr char kCacheMagic[8] = {'S', 'D', 'I', 'G', 'F', 'E', 'A', '1'};

uint64_t fnv1a(const std::string& bytes) {
    // The 64-bit FNV-1a offset basis and prime.
    uint64_t hash = 14695981039346656037ull;
    for (unsigned char c : bytes) {
        hash ^= c;
        hash *= 1099511628211ull;
    }
    return hash;
}

std::vector<uint64_t> cache_header(uint64_t manifest_hash, uint64_t count) {
    return {static_cast<uint64_t>(kMelBands), static_cast<uint64_t>(kWindowMs),
            static_cast<uint64_t>(kHopMs), manifest_hash, count};
}

// The cached features, or an empty vector when the cache is missing, stale or damaged.
std::vector<Features> read_cache(const std::string& path, const std::vector<uint64_t>& header) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    char magic[sizeof kCacheMagic];
    std::vector<uint64_t> stored(header.size());
    in.read(magic, sizeof magic);
    in.read(reinterpret_cast<char*>(stored.data()),
            static_cast<std::streamsize>(stored.size() * sizeof(uint64_t)));
    if (!in || std::memcmp(magic, kCacheMagic, sizeof magic) != 0 || stored != header) return {};
    std::vector<Features> out(header.back());
    for (auto& f : out) {
        in.read(reinterpret_cast<char*>(&f.frames), sizeof f.frames);
        // A damaged count must not become a huge allocation: a 10-minute utterance bounds it.
        constexpr int64_t kMaxFrames = 60000;
        if (!in || f.frames < 1 || f.frames > kMaxFrames) return {};
        f.bands = kMelBands;
        f.values.resize(static_cast<size_t>(f.frames * f.bands));
        in.read(reinterpret_cast<char*>(f.values.data()),
                static_cast<std::streamsize>(f.values.size() * sizeof(float)));
        if (!in) return {};
    }
    if (in.peek() != std::ifstream::traits_type::eof()) return {};
    return out;
}

void write_cache(const std::string& path, const std::vector<uint64_t>& header,
                 const std::vector<Features>& features) {
    // Written beside and renamed over, so an interrupted run never leaves a half-written cache
    // that a later run would have to detect.
    const std::string partial = path + ".partial";
    {
        std::ofstream out(partial, std::ios::binary | std::ios::trunc);
        out.write(kCacheMagic, sizeof kCacheMagic);
        out.write(reinterpret_cast<const char*>(header.data()),
                  static_cast<std::streamsize>(header.size() * sizeof(uint64_t)));
        for (const auto& f : features) {
            out.write(reinterpret_cast<const char*>(&f.frames), sizeof f.frames);
            out.write(reinterpret_cast<const char*>(f.values.data()),
                      static_cast<std::streamsize>(f.values.size() * sizeof(float)));
        }
        if (!out) {
            std::fprintf(stderr, "warning: cannot write the feature cache %s; continuing\n",
                         partial.c_str());
            return;
        }
    }
    if (std::rename(partial.c_str(), path.c_str()) != 0)
        std::fprintf(stderr, "warning: cannot rename %s to %s; continuing\n", partial.c_str(),
                     path.c_str());
}

}  // namespace

std::vector<Features> cached_features(const std::string& cache_path,
                                      const std::string& manifest_text,
                                      const std::vector<const Utterance*>& utterances) {
    const auto header = cache_header(fnv1a(manifest_text), utterances.size());
    std::vector<Features> features = read_cache(cache_path, header);
    if (!features.empty()) {
        std::printf("features of %zu utterances read from %s\n", utterances.size(),
                    cache_path.c_str());
        return features;
    }
    const auto start = std::chrono::steady_clock::now();
    for (const auto* u : utterances) features.push_back(compute_features(u->path));
    write_cache(cache_path, header, features);
    std::printf("features of %zu utterances computed in %.1f s, cached in %s\n", utterances.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                cache_path.c_str());
    return features;
}

}  // namespace spoken_digits
