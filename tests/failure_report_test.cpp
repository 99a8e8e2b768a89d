// Failure headlines for CUDA and NCCL errors, from the texts PyTorch 2.x produces (copied from its
// C10_CUDA_CHECK, CUDACachingAllocator, C10D_NCCL_CHECK and ProcessGroupNCCL watchdog messages).
#include <gtest/gtest.h>

#include "worker/failure_report.hpp"

namespace ddprun::worker {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(FailureReport, CudaOutOfMemoryNamesTheDeviceAndSuggestsASmallerBatch) {
  const std::string what =
      "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.2 GiB "
      "is free.\nException raised from malloc at /pytorch/c10/cuda/CUDACachingAllocator.cpp:1340 (most recent "
      "call first):\nframe #0: ...";
  FailureReport r = describeFailure("c10::OutOfMemoryError", what, "rank 0 on cuda:0");
  EXPECT_EQ(r.type, "CudaOutOfMemory");
  EXPECT_TRUE(has(r.headline, "Tried to allocate 20.00 GiB")) << r.headline;
  EXPECT_TRUE(has(r.headline, "[rank 0 on cuda:0]")) << r.headline;
  EXPECT_TRUE(has(r.headline, "--batch-size")) << r.headline;
  EXPECT_FALSE(has(r.headline, "\n"));
}

TEST(FailureReport, NcclErrorShowsTheCauseFromTheLastErrorLine) {
  const std::string what =
      "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run "
      "with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\nncclUnhandledCudaError: Call to CUDA function "
      "failed.\nLast error:\nCuda failure 2 'out of memory'\nException raised from ...";
  FailureReport r = describeFailure("c10::Error", what, "rank 1 on cuda:1");
  EXPECT_EQ(r.type, "NcclError");
  EXPECT_TRUE(has(r.headline, "NCCL error: unhandled cuda error")) << r.headline;
  EXPECT_FALSE(has(r.headline, "ProcessGroupNCCL.cpp")) << r.headline;
  EXPECT_TRUE(has(r.headline, "(last error: Cuda failure 2 'out of memory')")) << r.headline;
  EXPECT_TRUE(has(r.headline, "[rank 1 on cuda:1]")) << r.headline;
  EXPECT_TRUE(has(r.headline, "NCCL_DEBUG=INFO")) << r.headline;
  EXPECT_FALSE(has(r.headline, "\n"));
}

TEST(FailureReport, NcclErrorWithTheCauseOnTheSameLine) {
  FailureReport r = describeFailure("c10::DistBackendError",
                                    "NCCL error in: x.cpp:1, remote process exited or there was a network error, "
                                    "NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network "
                                    "error or a remote process exiting prematurely.\nLast error: socket closed",
                                    "");
  EXPECT_EQ(r.type, "NcclError");
  EXPECT_TRUE(has(r.headline, "(last error: socket closed)")) << r.headline;
  EXPECT_FALSE(has(r.headline, "[")) << "no location when none is known: " << r.headline;
}

TEST(FailureReport, WatchdogTimeoutPointsAtThePeers) {
  const std::string what =
      "[PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] "
      "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=203530, "
      "NumelOut=203530, Timeout(ms)=300000) ran for 300070 milliseconds before timing out.\nException raised ...";
  FailureReport r = describeFailure("c10::Error", what, "rank 0 on cuda:0");
  EXPECT_EQ(r.type, "NcclTimeout");
  EXPECT_TRUE(has(r.headline, "OpType=ALLREDUCE")) << r.headline;
  EXPECT_TRUE(has(r.headline, "peer rank is dead or stuck")) << r.headline;
}

TEST(FailureReport, CudaKernelErrorSuggestsLaunchBlocking) {
  const std::string what =
      "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported "
      "at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
      "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n";
  FailureReport r = describeFailure("c10::Error", what, "rank 0 on cuda:0");
  EXPECT_EQ(r.type, "CudaError");
  EXPECT_EQ(r.headline,
            "CUDA error: an illegal memory access was encountered [rank 0 on cuda:0]; rerun with "
            "CUDA_LAUNCH_BLOCKING=1 to find the failing kernel");
}

TEST(FailureReport, OtherErrorsKeepTheirTypeAndFirstLine) {
  FailureReport r =
      describeFailure("DataError", "data file t10k-images-idx3-ubyte is truncated\nmore", "rank 0 on cpu");
  EXPECT_EQ(r.type, "DataError");
  EXPECT_EQ(r.headline, "data file t10k-images-idx3-ubyte is truncated");
  r = describeFailure("c10::Error", "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer",
                      "rank 1 on cpu");
  EXPECT_EQ(r.type, "c10::Error");
  EXPECT_EQ(r.headline, "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer");
}

}  // namespace
}  // namespace ddprun::worker
