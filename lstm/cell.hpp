#pragma once

// The element-wise cell as a value the oracle and the registry can hold: a cell type (see
// kernels/common/gates.hpp for what one is) instantiated at double behind function pointers. A
// step engine compiles its Cell into its kernels; its variant hands cell_functions<Cell>() to the
// oracle, which then checks the engine against the same math. Cheap to include: no CUDA header,
// nothing beyond <cmath>.

#include "kernels/common/gates.hpp"

namespace lstm {

// One hidden unit's forward and backward in double; the members mirror a cell type's statics.
// Meant to grow members for cells with parameters of their own (peepholes, a layer norm), with
// defaults that mean "none", so cells written before keep compiling.
struct CellFunctions {
    const char* name = nullptr;
    // (pre_i, pre_f, pre_g, pre_o) -> activated gates, the ones backward is given.
    kernels::Gates<double> (*activate)(double pre_i, double pre_f, double pre_g,
                                       double pre_o) = nullptr;
    // (gates, c_{t-1}) -> c_t
    double (*cell_state)(const kernels::Gates<double>& gates, double c_prev) = nullptr;
    // (gates, c_t) -> h_t, before any projection
    double (*hidden_state)(const kernels::Gates<double>& gates, double c) = nullptr;
    // dh: total gradient reaching h_t; dc: gradient reaching c_t from step t+1 (or dcn) ->
    // gradients of the four pre-activations and of c_{t-1}.
    kernels::CellGrads<double> (*cell_backward)(const kernels::Gates<double>& gates, double c_prev,
                                                double c, double dh, double dc) = nullptr;
};

// The description of Cell, one instance per type, so two variants with the same cell hand the
// oracle the same object.
template <class Cell>
const CellFunctions& cell_functions() {
    static const CellFunctions functions = [] {
        CellFunctions f;
        f.name = Cell::name;
        f.activate = [](double pre_i, double pre_f, double pre_g, double pre_o) {
            return Cell::template activate<double>(pre_i, pre_f, pre_g, pre_o);
        };
        f.cell_state = [](const kernels::Gates<double>& a, double c_prev) {
            return Cell::template cell_state<double>(a, c_prev);
        };
        f.hidden_state = [](const kernels::Gates<double>& a, double c) {
            return Cell::template hidden_state<double>(a, c);
        };
        f.cell_backward = [](const kernels::Gates<double>& a, double c_prev, double c, double dh,
                             double dc) {
            return Cell::template cell_backward<double>(a, c_prev, c, dh, dc);
        };
        return f;
    }();
    return functions;
}

// PyTorch's cell, the one every built-in variant computes and the oracle's default.
inline const CellFunctions& pytorch_cell() { return cell_functions<kernels::PyTorchCell>(); }

}  // namespace lstm
