// The matmul calibration hook (ops.h: set_matmul_observer). One global; calibration only.
#include "ops/ops.h"

namespace eg::ops {

namespace {
MatmulObserver g_observer = nullptr;
void* g_user = nullptr;
}  // namespace

void set_matmul_observer(MatmulObserver observer, void* user) {
  g_observer = observer;
  g_user = user;
}

bool matmul_observer_set() { return g_observer != nullptr; }

void notify_matmul_observer(const Weight& W, const float* x, int64_t T) {
  if (g_observer) g_observer(W, x, T, g_user);
}

}  // namespace eg::ops
