#pragma once

// Umbrella header: everything a training program needs.

#include "lstm/config.hpp"
#include "lstm/error.hpp"
#include "lstm/layer.hpp"
#include "lstm/params.hpp"
#include "lstm/registry.hpp"
#include "lstm/tensor.hpp"
#include "lstm/threads.hpp"
#include "lstm/variant.hpp"
