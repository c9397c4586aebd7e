# cmake --install puts the Python package where the interpreter finds it under
# the prefix: install BUILD_DIR into a fresh prefix, then import dtsim from
# there (and only there: the build tree is not on the path) and run a puzzle
# and a hardware-world config through the installed module and command.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
set(site ${WORK_DIR}/prefix/${SITE_DIR})
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=DTSIM_EXECUTABLE PYTHONPATH=${site} PYTHONDONTWRITEBYTECODE=1
          ${PYTHON} -c "
import dtsim, dtsim.puzzles as p
assert dtsim.__file__.startswith('${site}/'), dtsim.__file__
async def one(model):
    g = await model.allreduce(model.fake_grad(0, [model.rank]), 0)
    return sorted(g.batches)
dist = p.Dist(2)
assert p.gather(*[one(p.Model(layers=1, batches=2, rank=i, dist=dist)) for i in range(2)]) == [[0, 1], [0, 1]]
from dtsim.runs import executable
assert executable() == '${WORK_DIR}/prefix/bin/dtsim', executable()
r = dtsim.run('${CONFIG}', timeline=False)
assert r['gpus'] > 0
print('installed dtsim module: ok')
"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed dtsim module failed (${rc})")
endif()
