#pragma once
// Runs a test body once under every SIMD target this build compiled and this CPU supports, so a
// kernel's scalar, SSE4 and AVX2 versions are all checked in one process.
#include <gtest/gtest.h>
#include <hwy/targets.h>

namespace fluxrt::test {

// Calls body() once under each target; stops at the first fatal failure.
template <typename Body>
void for_each_target(Body body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    body();
    hwy::SetSupportedTargetsForTest(0);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace fluxrt::test
