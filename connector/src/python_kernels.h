// The `kernels` submodule of the strata_connector Python module (python_kernels.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace strata::connector {

// Adds strata_connector.kernels to `parent`.
void BindKernels(pybind11::module_& parent);

}  // namespace strata::connector
