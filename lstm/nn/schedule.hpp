#pragma once

// Learning-rate schedules as pure functions of the step index: lr(s) is the rate of the (s+1)-th
// optimizer step, the value torch.optim.lr_scheduler's scheduler holds after s calls of
// scheduler.step() (one per optimizer step). Use with the optimizers of lstm/nn/optim.hpp:
//   for (int64_t s = 0; s < steps; ++s) { adam.set_lr(schedule.lr(s)); ...; adam.step(); }
// A pure function (no hidden counter) makes resuming at step s exact: nothing but s to save.
// PyTorch computes some of these recursively; the closed forms here agree with its values to
// rounding (tests/schedule_test.cpp compares them with PyTorch 1.13's).

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "lstm/error.hpp"

namespace lstm::nn {

namespace detail {

// The step and the settings every schedule has; each checks its own others. A rate that is
// negative or NaN would reach the optimizer as one (set_lr refuses it there, far from the cause).
inline void check_schedule(const char* schedule, int64_t step, double base_lr, double eta_min = 0) {
    check(step >= 0, schedule, "::lr: step must be >= 0, got ", step);
    check(base_lr >= 0 && std::isfinite(base_lr), schedule,
          ": base_lr must be finite and >= 0, got ", base_lr);
    check(eta_min >= 0 && std::isfinite(eta_min), schedule,
          ": eta_min must be finite and >= 0, got ", eta_min);
}

inline void check_cosine(const char* schedule, int64_t t_max) {
    check(t_max >= 1, schedule, ": t_max must be >= 1, got ", t_max);
}

inline void check_start_factor(const char* schedule, double start_factor) {
    check(start_factor > 0 && start_factor <= 1, schedule, ": start_factor must be in (0, 1], got ",
          start_factor);
}

}  // namespace detail

// torch.optim.lr_scheduler.StepLR: base_lr * gamma^floor(s / step_size).
struct StepLr {
    double base_lr;
    int64_t step_size;
    double gamma = 0.1;

    double lr(int64_t step) const {
        detail::check_schedule("StepLr", step, base_lr);
        check(step_size >= 1, "StepLr: step_size must be >= 1, got ", step_size);
        check(gamma >= 0 && std::isfinite(gamma), "StepLr: gamma must be finite and >= 0, got ",
              gamma);
        return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
    }
};

// torch.optim.lr_scheduler.CosineAnnealingLR (without restarts):
// eta_min + (base_lr - eta_min) (1 + cos(pi s / t_max)) / 2, which reaches eta_min at s = t_max
// and, like PyTorch's, rises again after it.
struct CosineLr {
    double base_lr;
    int64_t t_max;
    double eta_min = 0;

    double lr(int64_t step) const {
        detail::check_schedule("CosineLr", step, base_lr, eta_min);
        detail::check_cosine("CosineLr", t_max);
        // cos(pi s / t_max) from s's whole half-periods and the rest: pi * s in a double loses
        // the phase once s is large (2^60), where the period keeps it exact.
        const double pi = std::acos(-1.0);
        const double sign = (step / t_max) % 2 == 0 ? 1.0 : -1.0;
        const double rest = static_cast<double>(step % t_max) / static_cast<double>(t_max);
        return eta_min + (base_lr - eta_min) * (1 + sign * std::cos(pi * rest)) / 2;
    }
};

// torch.optim.lr_scheduler.LinearLR: base_lr times a factor going linearly from start_factor
// to end_factor over total_iters steps, then staying at end_factor (PyTorch's defaults).
struct LinearLr {
    double base_lr;
    double start_factor = 1.0 / 3;
    double end_factor = 1.0;
    int64_t total_iters = 5;

    double lr(int64_t step) const {
        detail::check_schedule("LinearLr", step, base_lr);
        detail::check_start_factor("LinearLr", start_factor);
        check(end_factor >= 0 && end_factor <= 1, "LinearLr: end_factor must be in [0, 1], got ",
              end_factor);
        check(total_iters >= 1, "LinearLr: total_iters must be >= 1, got ", total_iters);
        const double done =
            static_cast<double>(std::min(step, total_iters)) / static_cast<double>(total_iters);
        return base_lr * (start_factor + (end_factor - start_factor) * done);
    }
};

// Linear warm-up, then cosine decay: PyTorch's
// SequentialLR([LinearLR(start_factor, 1, warmup), CosineAnnealingLR(t_max, eta_min)],
// milestones=[warmup]). Steps 0..warmup-1 warm up from start_factor * base_lr; step warmup starts
// the cosine at base_lr, which reaches eta_min t_max steps later.
struct WarmupCosineLr {
    double base_lr;
    int64_t warmup;
    int64_t t_max;
    double start_factor = 0.1;
    double eta_min = 0;

    double lr(int64_t step) const {
        // Every setting on every call, under this name: the parts check theirs only when used.
        detail::check_schedule("WarmupCosineLr", step, base_lr, eta_min);
        check(warmup >= 0, "WarmupCosineLr: warmup must be >= 0, got ", warmup);
        detail::check_cosine("WarmupCosineLr", t_max);
        detail::check_start_factor("WarmupCosineLr", start_factor);
        if (step < warmup) return LinearLr{base_lr, start_factor, 1.0, warmup}.lr(step);
        return CosineLr{base_lr, t_max, eta_min}.lr(step - warmup);
    }
};

}  // namespace lstm::nn
