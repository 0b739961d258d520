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

inline void check_schedule_step(const char* schedule, int64_t step) {
    check(step >= 0, schedule, "::lr: step must be >= 0, got ", step);
}

}  // namespace detail

// torch.optim.lr_scheduler.StepLR: base_lr * gamma^floor(s / step_size).
struct StepLr {
    double base_lr;
    int64_t step_size;
    double gamma = 0.1;

    double lr(int64_t step) const {
        detail::check_schedule_step("StepLr", step);
        check(step_size >= 1, "StepLr: step_size must be >= 1, got ", step_size);
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
        detail::check_schedule_step("CosineLr", step);
        check(t_max >= 1, "CosineLr: t_max must be >= 1, got ", t_max);
        const double pi = std::acos(-1.0);
        const double phase = pi * static_cast<double>(step) / static_cast<double>(t_max);
        return eta_min + (base_lr - eta_min) * (1 + std::cos(phase)) / 2;
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
        detail::check_schedule_step("LinearLr", step);
        check(start_factor > 0 && start_factor <= 1,
              "LinearLr: start_factor must be in (0, 1], got ", start_factor);
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
        detail::check_schedule_step("WarmupCosineLr", step);
        check(warmup >= 0, "WarmupCosineLr: warmup must be >= 0, got ", warmup);
        if (step < warmup) return LinearLr{base_lr, start_factor, 1.0, warmup}.lr(step);
        return CosineLr{base_lr, t_max, eta_min}.lr(step - warmup);
    }
};

}  // namespace lstm::nn
