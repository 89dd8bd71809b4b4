// A program outside the project that plans with the installed planner
// library: a device profile + a model's config.json -> the expert cache.
#include <cstdio>

#include "coli/planner/footprint.h"
#include "coli/planner/plan.h"
#include "coli/probe/profile_io.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PROFILE CONFIG_JSON\n", argv[0]);
    return 2;
  }
  auto profile = coli::load_profile(argv[1]);
  if (!profile) {
    std::fprintf(stderr, "%s\n", profile.error().message.c_str());
    return 1;
  }
  auto footprint = coli::planner::read_footprint(argv[2], coli::WeightFormat::q4_g64, coli::DenseFormat::source);
  if (!footprint) {
    std::fprintf(stderr, "%s\n", footprint.error().message.c_str());
    return 1;
  }
  coli::planner::PlanRequest request;
  request.ram = 16ull << 30;
  request.gpu = "none";
  auto plan = coli::planner::make_plan(*profile, *footprint, request);
  if (!plan) {
    std::fprintf(stderr, "%s\n", plan.error().message.c_str());
    return 3;
  }
  std::printf("cap %d of %d experts\n", plan->cap, plan->n_experts);
  return 0;
}
