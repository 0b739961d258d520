// Spoken-digits example: audio -> log-mel features, the input of the recogniser.
//
// read_audio() reads a mono file with libsndfile (WAV and whatever else it reads) at the file's
// own sample rate. log_mel() turns samples into 40 log mel-band energies per 10 ms:
//
//   frames   window 25 ms, hop 10 ms, both rounded to whole samples of the file's rate (half
//            up: 22050 Hz -> 551 and 221 samples, 16000 Hz -> 400 and 160); only whole windows
//            are framed: frames = 1 + (samples - window) / hop; the (samples - window) % hop
//            trailing samples, under 10 ms, are in no frame (padding would invent audio)
//   window   symmetric Hamming, 0.54 - 0.46 cos(2 pi n / (window - 1))
//   spectrum |FFT|^2 of the windowed frame zero-padded to the next power of two >= window,
//            bins 0 .. fft_size / 2, no scaling (samples are in [-1, 1])
//   mel      HTK scale, mel(f) = 2595 log10(1 + f / 700); 40 triangular filters with corners
//            equally spaced in mel from 0 Hz to Nyquist, each triangle linear in Hz with peak 1
//            (not area-normalised)
//   log      natural log of max(energy, kLogFloor)
//
// normalize_per_band() then subtracts each band's mean over the utterance and divides by its
// standard deviation (per-utterance CMVN). compute_features() = read_audio + log_mel +
// normalize_per_band. reference_features.py computes the same with numpy, independently, and
// features_test.cpp compares the two on the committed fixtures.
//
// Errors are lstm::InvalidArgument (an unreadable, multi-channel, empty, truncated or too-short
// file, naming it) or lstm::Unsupported (a sample rate too low for 40 mel bands).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spoken_digits {

constexpr int kMelBands = 40;
constexpr int kWindowMs = 25;
constexpr int kHopMs = 10;
// About 90 dB below a speech frame's band energy at espeak-ng's level and above the 16-bit
// quantisation noise of a few FFT bins: exact digital silence, which espeak-ng's output has a
// lot of, then lands where near-silence does instead of becoming a far outlier that would
// dominate each band's variance.
constexpr double kLogFloor = 1e-6;
// Added to each band's variance before dividing, so a constant band (all floor) becomes zeros
// instead of NaN; far below the variance of any band that carries speech (order 1 and above).
constexpr double kVarianceFloor = 1e-6;

struct Audio {
    std::vector<float> samples;  // (samples,) mono, in [-1, 1]
    int sample_rate = 0;         // Hz, the file's own
};

// The whole file. Throws lstm::InvalidArgument naming `path` when it cannot be opened or
// decoded, is not mono, is empty, is a WAV file shorter than its header says, or ends early.
Audio read_audio(const std::string& path);

struct FrameLayout {
    int64_t window = 0;    // samples in one analysis window (kWindowMs)
    int64_t hop = 0;       // samples between window starts (kHopMs)
    int64_t fft_size = 0;  // next power of two >= window
};

FrameLayout frame_layout(int sample_rate);

// Whole windows in `samples` samples; 0 when even one does not fit.
int64_t frame_count(int64_t samples, const FrameLayout& layout);

// (bands, fft_size / 2 + 1) row-major: weight of each power-spectrum bin in each band. Throws
// lstm::Unsupported when a band would cover no bin (a sample rate too low for `bands`).
std::vector<double> mel_filterbank(int sample_rate, int64_t fft_size, int bands);

struct Features {
    int64_t frames = 0;
    int64_t bands = 0;
    std::vector<float> values;  // (frames, bands) row-major
};

// Log mel-band energies, not normalised. `source` names the audio in error messages (a path).
// Throws lstm::InvalidArgument when not even one window fits.
Features log_mel(const std::vector<float>& samples, int sample_rate, const std::string& source);

// In place, per band over the frames: (x - mean) / sqrt(variance + kVarianceFloor), with the
// population variance (divided by frames).
void normalize_per_band(Features& features);

// read_audio(path) -> log_mel -> normalize_per_band: (frames, kMelBands).
Features compute_features(const std::string& path);

}  // namespace spoken_digits
