/* Prints, with the interpreter's own headers, where the fields memtape reads live:
 * `offsetof` in the structs of CPython's internal headers, one "name offset" line each.
 * tests/test_frame_layout.py compares them with the layout memtape reads at import (from
 * _Py_DebugOffsets on 3.13+, written in for 3.11 and 3.12). */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe_structs.h"
#else
#include "internal/pycore_frame.h"
#endif
int main(void) {
#if PY_VERSION_HEX >= 0x030D0000
  printf("current_frame %zu\n", offsetof(PyThreadState, current_frame));
  printf("frame_code %zu\n", offsetof(_PyInterpreterFrame, f_executable));
  printf("frame_instr %zu\n", offsetof(_PyInterpreterFrame, instr_ptr));
#else
  printf("tstate_cframe %zu\n", offsetof(PyThreadState, cframe));
  printf("current_frame %zu\n", offsetof(_PyCFrame, current_frame));
  printf("frame_code %zu\n", offsetof(_PyInterpreterFrame, f_code));
  printf("frame_instr %zu\n", offsetof(_PyInterpreterFrame, prev_instr));
#endif
  printf("frame_previous %zu\n", offsetof(_PyInterpreterFrame, previous));
  printf("frame_owner %zu\n", offsetof(_PyInterpreterFrame, owner));
  printf("code_adaptive %zu\n", offsetof(PyCodeObject, co_code_adaptive));
  printf("code_firsttraceable %zu\n", offsetof(PyCodeObject, _co_firsttraceable));
#if PY_VERSION_HEX < 0x030C0000
  printf("frame_is_entry %zu\n", offsetof(_PyInterpreterFrame, is_entry));
#endif
  return 0;
}
