/* Compiled as C: the position-independent chunks' C header must stand alone in a C translation
 * unit. Returns what a begin on a NULL connector returns (STRATA_INVALID_ARGUMENT). */
#include "strata/pic_connector_c.h"

int strata_pic_c_header_check(void) {
  strata_pic_request_options options;
  strata_pic_request_options_init(&options);
  strata_pic_span chunk = {0, 16};
  strata_pic_plan* plan = NULL;
  const uint32_t prompt[16] = {0};
  strata_status status = strata_pic_begin(NULL, "r", prompt, 16, &chunk, 1, &options, &plan);
  strata_pic_plan_destroy(plan);
  return (int)status;
}
