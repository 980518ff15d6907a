/**
 * aotbench-cells: a code cell whose first line starts with `%%aot_kernel` (cpu or gpu) is edited as C++.
 *
 * The notebook gives every code cell its kernel's language (IPython); this plugin watches each code cell's
 * source and, while its first line is a `%%aot_kernel` line, sets the cell model's mime type to C++ (for gpu cells
 * too: JupyterLab's CodeMirror language registry has no CUDA of its own). When the first line changes to anything
 * else, the cell gets the notebook's language back. The notebook resets every code cell's
 * mime type when the kernel tells its language, so a reset of a kernel cell is answered by setting C++ again.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICellModel } from '@jupyterlab/cells';
import { INotebookTracker, Notebook, NotebookPanel } from '@jupyterlab/notebook';

/** The mime type of JupyterLab's bundled C++ language (CodeMirror 6's lang-cpp). */
export const CXX_MIME = 'text/x-c++src';

/** `%%aot_kernel` alone or followed by its arguments (`cpu`, `gpu`, options). */
const KERNEL_LINE = /^%%aot_kernel(\s|$)/;

/** Whether a cell with this source is compiled by the `%%aot_kernel` magic. */
export function isKernelCell(source: string): boolean {
  const end = source.indexOf('\n');
  return KERNEL_LINE.test(end < 0 ? source : source.slice(0, end));
}

/** The code cells this plugin gave the C++ mime type, so that only those are given the notebook's back. */
const switched = new WeakSet<ICellModel>();
const watchedCells = new WeakSet<ICellModel>();
const watchedPanels = new WeakSet<NotebookPanel>();

function apply(notebook: Notebook, cell: ICellModel): void {
  if (cell.type !== 'code' || cell.isDisposed) {
    return;
  }
  if (isKernelCell(cell.sharedModel.getSource())) {
    switched.add(cell);
    if (cell.mimeType !== CXX_MIME) {
      cell.mimeType = CXX_MIME;
    }
  } else if (switched.has(cell)) {
    switched.delete(cell);
    if (cell.mimeType === CXX_MIME) {
      cell.mimeType = notebook.codeMimetype;
    }
  }
}

function watchCell(notebook: Notebook, cell: ICellModel): void {
  if (cell.type !== 'code' || watchedCells.has(cell)) {
    return;
  }
  watchedCells.add(cell);
  cell.sharedModel.changed.connect((_, change) => {
    if (change.sourceChange) {
      apply(notebook, cell);
    }
  });
  cell.mimeTypeChanged.connect(() => apply(notebook, cell));
  apply(notebook, cell);
}

function watchNotebook(panel: NotebookPanel): void {
  if (watchedPanels.has(panel)) {
    return;
  }
  watchedPanels.add(panel);
  const notebook = panel.content;
  const watchModel = (): void => {
    const cells = notebook.model?.cells;
    if (!cells) {
      return;
    }
    for (const cell of cells) {
      watchCell(notebook, cell);
    }
    cells.changed.connect((_, change) => {
      for (const cell of change.newValues) {
        watchCell(notebook, cell);
      }
    });
  };
  notebook.modelChanged.connect(watchModel);
  watchModel();
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'aotbench-cells:plugin',
  description: 'Edits and highlights %%aot_kernel cells (aotbench) as C++.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker): void => {
    tracker.forEach(watchNotebook);
    tracker.widgetAdded.connect((_, panel) => watchNotebook(panel));
  }
};

export default plugin;
