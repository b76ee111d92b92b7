/**
 * After a reclaim: as the server stops, it tells its tabs why (the service's sentence, as the
 * user's page says it), what is kept and lost, which documents were saved, and where to
 * start again (lab/jupyterhub_gpu_reclaim_lab/stopped.py). This tab shows it in a dialog
 * before JupyterLab's own "Server unavailable" (dialogs queue: JupyterLab's comes after
 * this one is closed). Every word is the server's text, set as text, never as markup; its
 * times are written in the browser's zone by the service pages' own rule (static/localtime.js).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { localTimes } from '../../static/localtime';

/** The event's id (stopped.py SCHEMA_ID). */
export const STOPPED_EVENT = 'https://jupyterhub-gpu-reclaim.org/events/stopped';

/** A part of the reason (the service's `Sentence.parts_json`): words, or a time as the service's
 * pages hold it in a `<time>` (ISO 8601 instant, its UTC text, UTC on hover, how long ago). */
export interface IPart {
  text: string;
  time?: string;
  title?: string;
  relative?: string;
}

interface IStopped {
  why: string;
  whyParts: IPart[];
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
  const parts = Array.isArray(event.why_parts) ? event.why_parts : [];
  const whyParts = parts.every(isPart) ? (parts as IPart[]) : [];
  return { why: text('why'), whyParts, kept: text('kept'), lost: text('lost'), saved, again };
}

function isPart(p: unknown): boolean {
  if (typeof p !== 'object' || p === null) {
    return false;
  }
  const part = p as Record<string, unknown>;
  const optional = ['time', 'title', 'relative'].every(k => part[k] === undefined || typeof part[k] === 'string');
  return typeof part.text === 'string' && optional;
}

/** The reason as nodes: words as text, each time a `<time>` written in the browser's zone,
 * its first letter upper case and a full stop at its end (it reads "…, nothing has run"
 * after "why:" on the service's pages). */
function reason(s: IStopped): (string | Node)[] {
  const parts: IPart[] = s.whyParts.length ? s.whyParts : [{ text: s.why }];
  const out = parts.flatMap((p): (string | Node)[] => {
    if (!p.time) {
      return [p.text];
    }
    const time = document.createElement('time');
    time.dateTime = p.time;
    time.title = p.title ?? '';
    time.textContent = p.text;
    return p.relative ? [time, ` (${p.relative})`] : [time];
  });
  const [first, last] = [out[0], out[out.length - 1]];
  if (typeof first === 'string') {
    out[0] = first.charAt(0).toUpperCase() + first.slice(1);
  }
  if (typeof last !== 'string' || !last.endsWith('.')) {
    out.push('.');
  }
  return out;
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
    line('jp-GpuReclaim-why', ...reason(s));
    localTimes(this.node);
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
