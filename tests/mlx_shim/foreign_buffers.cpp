// A third-party C++ caller of MLX's foreign-memory API (built by the test).
#include <cstddef>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"

namespace mx = mlx::core;

static std::vector<mx::array> kept;
static int deleted = 0;

extern "C" {
// The allocator object MLX's exported allocator() hands this library.
void* shim_allocator() { return &mx::allocator::allocator(); }

// libmlx's one caller of make_buffer: array(void*, Shape, Dtype, deleter). Returns the
// array's last element (read from the array's own buffer).
float shim_wrap(float* data, int n) {
  kept.emplace_back(data, mx::Shape{n}, mx::float32, [](void*) { ++deleted; });
  return kept.back().data<float>()[n - 1];
}

int shim_deleted() { return deleted; }

void shim_drop() { kept.clear(); }

void* shim_make_buffer(void* ptr, size_t size) {
  return mx::allocator::make_buffer(ptr, size).ptr();
}

void shim_release(void* ptr) { mx::allocator::release(mx::allocator::Buffer(ptr)); }
}
