/**
 * After a reclaim: as the server stops, it tells its tabs why (the service's sentence, as the
 * user's page says it), what is kept and lost, which documents were saved, and where to
 * start again (lab/jupyterhub_gpu_reclaim_lab/stopped.py). This tab shows it in a dialog
 * before JupyterLab's own "Server unavailable" (dialogs queue: JupyterLab's comes after
 * this one is closed). Every word is the server's text, set as text, never as markup.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

/** The event's id (stopped.py SCHEMA_ID). */
export const STOPPED_EVENT = 'https://jupyterhub-gpu-reclaim.org/events/stopped';

interface IStopped {
  why: string;
  kept: string;
  lost: string;
  saved: string[];
  again: string;
}

function read(event: Record<string, unknown>): IStopped | null {
  const text = (key: string) => (typeof event[key] === 'string' ? (event[key] as string) : '');
  const again = text('again');
  // a path on this origin, or the hub's own host (JUPYTERHUB_HOST): never a script's URL
  if (!text('why') || !/^(https?:\/\/[^/]+)?\/(?!\/)/.test(again)) {
    return null;
  }
  const saved = Array.isArray(event.saved) ? event.saved.filter((p): p is string => typeof p === 'string') : [];
  return { why: text('why'), kept: text('kept'), lost: text('lost'), saved, again };
}

class StoppedBody extends Widget {
  constructor(s: IStopped) {
    super({ node: document.createElement('div') });
    this.addClass('jp-GpuReclaim-stopped');
    const line = (cls: string, ...parts: (string | Node)[]) => {
      const p = document.createElement('p');
      p.className = cls;
      p.append(...parts);
      this.node.appendChild(p);
    };
    // the service's sentence begins in lower case, as on its pages after "why:"
    const why = s.why.charAt(0).toUpperCase() + s.why.slice(1);
    line('jp-GpuReclaim-why', why.endsWith('.') ? why : `${why}.`);
    if (s.kept) {
      line('jp-GpuReclaim-kept', `Kept: ${s.kept}.`);
    }
    if (s.saved.length) {
      line('jp-GpuReclaim-saved-list', `Saved before the stop: ${s.saved.join(', ')}.`);
    }
    if (s.lost) {
      line('jp-GpuReclaim-lost', `Lost: ${s.lost}.`);
    }
    const link = document.createElement('a');
    link.className = 'jp-GpuReclaim-again';
    link.href = s.again;
    link.textContent = 'Start again';
    line('jp-GpuReclaim-again-line', link, ' starts this server anew and reopens your workspace.');
  }
}

export class AfterStop {
  constructor(app: JupyterFrontEnd, stopping: () => void) {
    this.app = app;
    this.stopping = stopping;
  }

  listen(): void {
    this.app.serviceManager.events.stream.connect((_, event) => {
      const stopped = event.schema_id === STOPPED_EVENT ? read(event as Record<string, unknown>) : null;
      if (stopped && !this.shown) {
        this.shown = true;
        this.stopping();
        void showDialog({
          title: 'The GPU reclaim stopped this server',
          body: new StoppedBody(stopped),
          buttons: [Dialog.cancelButton({ label: 'Close' })]
        });
      }
    });
  }

  private readonly app: JupyterFrontEnd;
  private readonly stopping: () => void;
  private shown = false;
}
