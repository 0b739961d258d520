// The explicit instantiations behind the `extern template` declarations of the library's class
// templates (Lstm, the dense layer, the optimizers, SequenceModel), for float and double. Part of
// lstm_variants, so their members are compiled once here rather than in every program.

#include "lstm/layer.hpp"
#include "lstm/nn/dense.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/optim.hpp"

namespace lstm {

template class LstmT<float>;
template class LstmT<double>;

namespace nn {

template class Dense<float>;
template class Dense<double>;
template class Sgd<float>;
template class Sgd<double>;
template class Adam<float>;
template class Adam<double>;
template class SequenceModel<float>;
template class SequenceModel<double>;

}  // namespace nn

}  // namespace lstm
