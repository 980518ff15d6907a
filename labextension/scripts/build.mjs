// `npm run build`: compiles src/ with tsc into lib/, bundles lib/ with @jupyterlab/builder into prebuilt/ (the
// prebuilt extension that the Python package ships under share/jupyter/labextensions/aotbench-cells), and
// records the sources it was built from (scripts/record-sources.mjs).
//
// @jupyterlab/builder needs JupyterLab's core package.json (which packages the application shares): it is
// read from the Python jupyterlab that $PYTHON imports (default: the repository's .venv, else python3).
// `jupyter labextension build` would do the same, but since JupyterLab 4.6 it asks the network for it.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const venvPython = join(root, '..', '.venv', 'bin', 'python');
const python = process.env.PYTHON || (existsSync(venvPython) ? venvPython : 'python3');
const bin = name => join(root, 'node_modules', '.bin', name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: 'inherit' });

const corePath = execFileSync(
  python,
  ['-c', 'import jupyterlab, pathlib; print(pathlib.Path(jupyterlab.__file__).parent / "staging")'],
  { encoding: 'utf8' }
).trim();

run(bin('tsc'), []);
run(bin('build-labextension'), ['--core-path', corePath, '.']);
run(process.execPath, [join(root, 'scripts', 'record-sources.mjs')]);
