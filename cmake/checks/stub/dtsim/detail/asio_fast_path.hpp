// For cmake/checks/asio_fast_path.cpp only: the fast path, asked for.
#pragma once
#define DTSIM_FRAMELESS_AWAIT 1
