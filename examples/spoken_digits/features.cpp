// Spoken-digits example: the log-mel front end declared (and specified) in features.hpp.
// libsndfile decodes the audio and Eigen's FFT module transforms it; the arithmetic is done in
// double and only the result is stored as float, so it matches reference_features.py (numpy,
// float64) to well within the test's tolerance.

#include "features.hpp"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>
#include <sstream>
#include <string>
#include <unsupported/Eigen/FFT>

#include "lstm/error.hpp"

namespace spoken_digits {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kMsPerSecond = 1000;
// HTK's mel scale: mel(f) = kMelScale * log10(1 + f / kMelBreakHz).
constexpr double kMelScale = 2595.0;
constexpr double kMelBreakHz = 700.0;
// Hamming window coefficients.
constexpr double kHammingA = 0.54, kHammingB = 0.46;

double hz_to_mel(double hz) { return kMelScale * std::log10(1.0 + hz / kMelBreakHz); }
double mel_to_hz(double mel) { return kMelBreakHz * (std::pow(10.0, mel / kMelScale) - 1.0); }

// `ms` milliseconds in samples, rounded half up in integers so every implementation agrees on
// the .5 cases (22050 Hz * 10 ms = 220.5 samples -> 221).
int64_t ms_to_samples(int sample_rate, int ms) {
    return (int64_t{sample_rate} * ms + kMsPerSecond / 2) / kMsPerSecond;
}

struct SndfileCloser {
    void operator()(SNDFILE* file) const { sf_close(file); }
};

// The first line of libsndfile's log about `file` that starts with `key`, or "".
std::string sndfile_log_line(SNDFILE* file, const std::string& key) {
    // The log of one open file is a few hundred characters; libsndfile truncates to the buffer.
    std::vector<char> log(16384, '\0');
    sf_command(file, SFC_GET_LOG_INFO, log.data(), static_cast<int>(log.size() - 1));
    std::istringstream lines(log.data());
    for (std::string line; std::getline(lines, line);) {
        if (line.compare(0, key.size(), key) == 0) return line;
    }
    return "";
}

}  // namespace

Audio read_audio(const std::string& path) {
    SF_INFO info{};
    std::unique_ptr<SNDFILE, SndfileCloser> file(sf_open(path.c_str(), SFM_READ, &info));
    // sf_strerror(nullptr) reports why the last sf_open failed.
    lstm::check(file != nullptr, "spoken_digits: cannot read audio file '", path,
                "': ", sf_strerror(nullptr));
    lstm::check(info.channels == 1, "spoken_digits: '", path, "' has ", info.channels,
                " channels; only mono audio is supported");
    lstm::check(info.samplerate > 0, "spoken_digits: '", path, "' has sample rate ",
                info.samplerate, " Hz");
    // A WAV file cut short (an interrupted copy or write) still opens: libsndfile shortens
    // info.frames to the samples present and only notes the mismatch in its log, as
    // "data : <header's size> (should be <size present>)". Refuse it rather than read less
    // audio than the file announces.
    if ((info.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_WAV) {
        const std::string data_line = sndfile_log_line(file.get(), "data");
        lstm::check(data_line.find("should be") == std::string::npos, "spoken_digits: '", path,
                    "' is truncated: its header announces more audio than the file holds "
                    "(libsndfile: \"",
                    data_line, "\")");
    }
    lstm::check(info.frames > 0, "spoken_digits: '", path, "' has no samples");
    Audio audio;
    audio.sample_rate = info.samplerate;
    audio.samples.resize(static_cast<size_t>(info.frames));
    // libsndfile scales integer PCM to [-1, 1] (16-bit: divided by 32768).
    const sf_count_t read = sf_readf_float(file.get(), audio.samples.data(), info.frames);
    lstm::check(read == info.frames, "spoken_digits: '", path, "' ends early: read ", read,
                " of the ", info.frames, " samples its header announces (", sf_strerror(file.get()),
                ")");
    return audio;
}

FrameLayout frame_layout(int sample_rate) {
    lstm::check(sample_rate > 0, "spoken_digits: sample rate must be positive, got ", sample_rate);
    FrameLayout layout;
    layout.window = ms_to_samples(sample_rate, kWindowMs);
    layout.hop = ms_to_samples(sample_rate, kHopMs);
    // The symmetric Hamming window divides by window - 1; a 1-sample hop is the least there is.
    if (layout.window < 2 || layout.hop < 1) {
        lstm::fail_as<lstm::Unsupported>("spoken_digits: sample rate ", sample_rate,
                                         " Hz is too low for ", kWindowMs, " ms windows");
    }
    layout.fft_size = 1;
    while (layout.fft_size < layout.window) layout.fft_size *= 2;
    return layout;
}

int64_t frame_count(int64_t samples, const FrameLayout& layout) {
    if (samples < layout.window) return 0;
    return 1 + (samples - layout.window) / layout.hop;
}

std::vector<double> mel_filterbank(int sample_rate, int64_t fft_size, int bands) {
    lstm::check(bands > 0, "spoken_digits: mel bands must be positive, got ", bands);
    lstm::check(fft_size > 1, "spoken_digits: FFT size must exceed 1, got ", fft_size);
    const int64_t bins = fft_size / 2 + 1;
    const double nyquist = sample_rate / 2.0;
    // bands + 2 corner frequencies, equally spaced in mel: band b rises from corner b to b + 1
    // and falls to b + 2.
    std::vector<double> corner(static_cast<size_t>(bands) + 2);
    const double mel_step = hz_to_mel(nyquist) / (bands + 1);
    for (size_t i = 0; i < corner.size(); ++i) corner[i] = mel_to_hz(mel_step * i);

    std::vector<double> weights(static_cast<size_t>(bands * bins), 0.0);
    for (int b = 0; b < bands; ++b) {
        const double left = corner[b], centre = corner[b + 1], right = corner[b + 2];
        double total = 0.0;
        for (int64_t k = 0; k < bins; ++k) {
            const double hz = static_cast<double>(k) * sample_rate / fft_size;
            const double rising = (hz - left) / (centre - left);
            const double falling = (right - hz) / (right - centre);
            const double w = std::max(0.0, std::min(rising, falling));
            weights[b * bins + k] = w;
            total += w;
        }
        // An empty band would be log(floor) in every frame: no information, and a sign that
        // the spectrum is too coarse for this many bands.
        if (total <= 0.0) {
            lstm::fail_as<lstm::Unsupported>("spoken_digits: mel band ", b, " of ", bands, " (",
                                             left, " to ", right, " Hz) covers no FFT bin at ",
                                             sample_rate, " Hz with FFT size ", fft_size,
                                             "; the sample rate is too low for ", bands, " bands");
        }
    }
    return weights;
}

namespace {

// log_mel's values in double, (frames, kMelBands) row-major; sets `frames`.
std::vector<double> log_mel_energies(const std::vector<float>& samples, int sample_rate,
                                     const std::string& source, int64_t& frames_out) {
    const FrameLayout layout = frame_layout(sample_rate);
    const auto n = static_cast<int64_t>(samples.size());
    const int64_t frames = frame_count(n, layout);
    lstm::check(frames > 0, "spoken_digits: '", source, "' has ", n, " samples, fewer than one ",
                kWindowMs, " ms window (", layout.window, " samples at ", sample_rate, " Hz)");
    const int64_t bins = layout.fft_size / 2 + 1;
    const std::vector<double> filters = mel_filterbank(sample_rate, layout.fft_size, kMelBands);

    std::vector<double> window(static_cast<size_t>(layout.window));
    for (int64_t i = 0; i < layout.window; ++i) {
        window[i] = kHammingA - kHammingB * std::cos(2.0 * kPi * i / (layout.window - 1));
    }

    Eigen::FFT<double> fft;
    // Real input: only bins 0 .. fft_size / 2, the rest mirror them.
    fft.SetFlag(Eigen::FFT<double>::HalfSpectrum);
    std::vector<double> frame(static_cast<size_t>(layout.fft_size));
    std::vector<std::complex<double>> spectrum;
    std::vector<double> power(static_cast<size_t>(bins));

    std::vector<double> out(static_cast<size_t>(frames * kMelBands));
    for (int64_t t = 0; t < frames; ++t) {
        const float* start = samples.data() + t * layout.hop;
        // Zero-padded from window to fft_size.
        std::fill(frame.begin(), frame.end(), 0.0);
        for (int64_t i = 0; i < layout.window; ++i) frame[i] = start[i] * window[i];
        fft.fwd(spectrum, frame);
        for (int64_t k = 0; k < bins; ++k) power[k] = std::norm(spectrum[k]);
        for (int b = 0; b < kMelBands; ++b) {
            const double* w = filters.data() + b * bins;
            double energy = 0.0;
            for (int64_t k = 0; k < bins; ++k) energy += w[k] * power[k];
            out[t * kMelBands + b] = std::log(std::max(energy, kLogFloor));
        }
    }
    frames_out = frames;
    return out;
}

// normalize_per_band on (frames, bands) row-major values of type T (double inside
// compute_features, so the log energies are rounded to float only once).
template <typename T>
void normalize_rows(T* values, int64_t frames, int64_t bands) {
    if (frames == 0) return;
    for (int64_t b = 0; b < bands; ++b) {
        double mean = 0.0;
        for (int64_t t = 0; t < frames; ++t) mean += values[t * bands + b];
        mean /= frames;
        double variance = 0.0;
        for (int64_t t = 0; t < frames; ++t) {
            const double d = values[t * bands + b] - mean;
            variance += d * d;
        }
        variance /= frames;
        const double scale = 1.0 / std::sqrt(variance + kVarianceFloor);
        for (int64_t t = 0; t < frames; ++t) {
            T& v = values[t * bands + b];
            v = static_cast<T>((v - mean) * scale);
        }
    }
}

Features to_features(const std::vector<double>& values, int64_t frames) {
    Features f;
    f.frames = frames;
    f.bands = kMelBands;
    f.values.assign(values.begin(), values.end());
    return f;
}

}  // namespace

Features log_mel(const std::vector<float>& samples, int sample_rate, const std::string& source) {
    int64_t frames = 0;
    const std::vector<double> values = log_mel_energies(samples, sample_rate, source, frames);
    return to_features(values, frames);
}

void normalize_per_band(Features& features) {
    lstm::check(
        features.frames >= 0 && features.bands >= 0 &&
            static_cast<int64_t>(features.values.size()) == features.frames * features.bands,
        "spoken_digits: features hold ", features.values.size(), " values, not frames (",
        features.frames, ") x bands (", features.bands, ")");
    normalize_rows(features.values.data(), features.frames, features.bands);
}

Features compute_features(const std::string& path) {
    const Audio audio = read_audio(path);
    int64_t frames = 0;
    std::vector<double> values = log_mel_energies(audio.samples, audio.sample_rate, path, frames);
    normalize_rows(values.data(), frames, int64_t{kMelBands});
    return to_features(values, frames);
}

}  // namespace spoken_digits
