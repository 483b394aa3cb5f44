/* Compiled as C: the C ABI header must stand alone in a C translation unit. */
#include "strata/connector_c.h"

int strata_c_header_check(void) {
  strata_connector_options options;
  strata_options_init(&options);
  strata_scheduler* scheduler = NULL;
  strata_status status = strata_scheduler_create(&options, &scheduler);
  uint32_t num_chunks = 0;
  if (strata_scheduler_prefetch(scheduler, "r", NULL, 0, NULL, NULL, &num_chunks) !=
      STRATA_INVALID_ARGUMENT) {
    status = STRATA_INTERNAL;
  }
  strata_scheduler_destroy(scheduler);
  return (int)status;
}
