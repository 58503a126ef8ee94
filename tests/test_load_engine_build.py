"""The compiled load engine (experiments/measure/engine/loadgen.c) as built here: it compiles on this machine kind and
speaks both protocols, and what it declares of libnghttp2 (which it loads with dlopen, needing no development
headers) matches the library's own header where that is installed, so a changed ABI is caught here, not in a trial."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from experiments.measure.engine.build import engine_binary, engine_status

NGHTTP2_HEADER = Path("/usr/include/nghttp2/nghttp2.h")

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


def test_the_engine_builds_here_and_speaks_both_protocols() -> None:
    status = engine_status()
    assert status.available, status.problem
    assert status.version.startswith("tierbench-loadgen")
    assert status.http2, "libnghttp2.so.14 is on this machine kind (curl's dependency): gRPC must be available"


@pytest.mark.slow
@pytest.mark.skipif(not NGHTTP2_HEADER.exists(), reason="libnghttp2-dev's header is not installed here")
def test_the_engine_declares_nghttp2s_abi_as_its_header_does(tmp_path: Path) -> None:
    """The engine loads libnghttp2 with dlopen and declares the few types it uses: they must match the library's."""
    probe = tmp_path / "abi.c"
    probe.write_text("""#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
  printf("nv %zu %zu %zu %zu %zu %zu\\n", sizeof(nghttp2_nv), offsetof(nghttp2_nv, name), offsetof(nghttp2_nv, value),
         offsetof(nghttp2_nv, namelen), offsetof(nghttp2_nv, valuelen), offsetof(nghttp2_nv, flags));
  printf("hd %zu %zu %zu %zu %zu\\n", sizeof(nghttp2_frame_hd), offsetof(nghttp2_frame_hd, length),
         offsetof(nghttp2_frame_hd, stream_id), offsetof(nghttp2_frame_hd, type), offsetof(nghttp2_frame_hd, flags));
  printf("dp %zu %zu %zu\\n", sizeof(nghttp2_data_provider), offsetof(nghttp2_data_provider, source),
         offsetof(nghttp2_data_provider, read_callback));
  printf("se %zu ds %zu\\n", sizeof(nghttp2_settings_entry), sizeof(nghttp2_data_source));
  printf("%d %d %d %d %d %d %d %d %d\\n", NGHTTP2_ERR_WOULDBLOCK, NGHTTP2_ERR_CALLBACK_FAILURE, NGHTTP2_DATA_FLAG_EOF,
         NGHTTP2_DATA_FLAG_NO_COPY, NGHTTP2_NV_FLAG_NO_COPY_NAME, NGHTTP2_NV_FLAG_NO_COPY_VALUE, NGHTTP2_HEADERS,
         NGHTTP2_SETTINGS_ENABLE_PUSH, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE);
  return 0;
}
""")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-o", str(tmp_path / "abi"), str(probe)], check=True)
    theirs = subprocess.run([str(tmp_path / "abi")], capture_output=True, text=True, check=True).stdout
    ours = subprocess.run([str(engine_binary()), "--abi"], capture_output=True, text=True, check=True).stdout
    assert ours == theirs
