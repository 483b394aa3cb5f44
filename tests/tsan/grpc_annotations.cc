// ThreadSanitizer annotations for Debian's gRPC, linked into every executable of a TSan build with
// absl_sync_annotations.cc (see there); no other build has it.
//
// gRPC is not built with TSan either. Its locks reach TSan through absl_sync_annotations.cc, but
// a completion queue hands a finished operation from the thread that completed it to the thread
// that takes it out with lock-free code that TSan cannot see. The grpcpp code compiled into our
// executables (callback tags, call op sets, our reactors behind them) relies on that hand-off:
// whatever a thread did before it started an operation happens before whatever the thread that
// takes the operation's completion does after. This file tells TSan so, keyed by the operation's
// tag, for the entry points that libgrpc++ calls in libgrpc: it defines them in the executable,
// where the dynamic linker binds libgrpc++'s calls, and each calls libgrpc's own definition.
#include <dlfcn.h>
#include <grpc/grpc.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

namespace {

template <typename Function>
Function Real(Function, const char* name) {
  void* real = dlsym(RTLD_NEXT, name);
  if (real == nullptr) {
    std::fprintf(stderr, "tsan grpc annotations: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<Function>(real);
}

// Looked up once, at first use.
#define STRATA_REAL(function) static const auto real = Real(&function, #function)

// Every operation started with `tag` happens before its completion is taken (Completed).
void Started(void* tag) { __tsan_release(tag); }

grpc_event Completed(grpc_event event) {
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}

}  // namespace

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                      void* reserved) {
  STRATA_REAL(grpc_call_start_batch);
  Started(tag);
  return real(call, ops, nops, tag, reserved);
}

grpc_call_error grpc_server_request_call(grpc_server* server, grpc_call** call,
                                         grpc_call_details* details,
                                         grpc_metadata_array* request_metadata,
                                         grpc_completion_queue* cq_bound_to_call,
                                         grpc_completion_queue* cq_for_notification,
                                         void* tag_new) {
  STRATA_REAL(grpc_server_request_call);
  Started(tag_new);
  return real(server, call, details, request_metadata, cq_bound_to_call, cq_for_notification,
              tag_new);
}

grpc_call_error grpc_server_request_registered_call(grpc_server* server, void* registered_method,
                                                    grpc_call** call, gpr_timespec* deadline,
                                                    grpc_metadata_array* request_metadata,
                                                    grpc_byte_buffer** optional_payload,
                                                    grpc_completion_queue* cq_bound_to_call,
                                                    grpc_completion_queue* cq_for_notification,
                                                    void* tag_new) {
  STRATA_REAL(grpc_server_request_registered_call);
  Started(tag_new);
  return real(server, registered_method, call, deadline, request_metadata, optional_payload,
              cq_bound_to_call, cq_for_notification, tag_new);
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline,
                                      void* reserved) {
  STRATA_REAL(grpc_completion_queue_next);
  return Completed(real(cq, deadline, reserved));
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag, gpr_timespec deadline,
                                       void* reserved) {
  STRATA_REAL(grpc_completion_queue_pluck);
  return Completed(real(cq, tag, deadline, reserved));
}

}  // extern "C"
