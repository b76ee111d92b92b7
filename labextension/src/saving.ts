/**
 * Save before the stop (lab/jupyterhub_gpu_reclaim_lab/saving.py): the server asks its tabs,
 * on the event bus every tab keeps open (shown or hidden), to save their documents with
 * unsaved changes, a lead before the reclaim and as the stop starts, or in dry run to list
 * them. This tab asks nothing by itself: a request from a hidden tab would be the server's
 * activity (docs/lab.md).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { Contents, ServerConnection } from '@jupyterlab/services';

/** The event's id (saving.py SCHEMA_ID). */
export const SAVE_EVENT = 'https://jupyterhub-gpu-reclaim.org/events/save-before-stop';
/** JupyterLab's own margin when it compares the file on disk with the one it opened. */
const MODIFIED_MARGIN_MS = 500;

type Outcome = 'saving' | 'saved' | 'would-save' | 'read-only' | 'conflict' | 'failed';

interface IReport {
  path: string;
  outcome: Outcome;
  message: string;
}

/** What the save needs of a document's context (DocumentRegistry.Context). */
interface IDocContext {
  path: string;
  model: { dirty: boolean };
  contentsModel: Contents.IModel | null;
  save(): Promise<void>;
}

/** The words shown for an outcome that is not "saved". */
const NOT_SAVED: Record<string, string> = {
  'read-only': 'read-only',
  conflict: 'changed on disk since it was opened: not overwritten',
  failed: 'the save failed'
};

/** This tab's id in the reports: the server waits for each tab it asked. */
const TAB = Math.random().toString(36).slice(2, 14);

export class SaveBeforeStop {
  constructor(app: JupyterFrontEnd, shown: (note: string, title: string) => void) {
    this.app = app;
    this.shown = shown;
  }

  listen(): void {
    this.app.serviceManager.events.stream.connect((_, event) => {
      if (event.schema_id === SAVE_EVENT && typeof event.round === 'string') {
        void this.round(event.round as string, event.action === 'list', event.reason === 'stop');
      }
    });
  }

  /** The open documents with unsaved changes, each once (two views share a context). */
  private dirty(): IDocContext[] {
    const seen = new Set<IDocContext>();
    for (const widget of this.app.shell.widgets('main')) {
      const context = (widget as unknown as { context?: IDocContext }).context;
      if (context && context.model && context.model.dirty && typeof context.save === 'function') {
        seen.add(context);
      }
    }
    return [...seen];
  }

  private async round(round: string, list: boolean, stop: boolean): Promise<void> {
    const contexts = this.dirty();
    if (list) {
      await this.report(round, contexts.map(c => ({ path: c.path, outcome: 'would-save', message: '' })), true);
      return;
    }
    // named first, so that a save the stop cuts short is known as unfinished
    await this.report(round, contexts.map(c => ({ path: c.path, outcome: 'saving', message: '' })), false);
    const results: IReport[] = [];
    for (const context of contexts) {
      const result = await this.saveOne(context);
      results.push(result);
      await this.report(round, [result], false);
    }
    await this.report(round, [], true);
    if (results.length) {
      this.tell(results, stop);
    }
  }

  /** Save one document with its own save (no rename dialog for an untitled one), unless it
   * is read-only or the file on disk changed since it was opened or last saved here. */
  private async saveOne(context: IDocContext): Promise<IReport> {
    const path = context.path;
    const mine = context.contentsModel;
    if (mine && mine.writable === false) {
      return { path, outcome: 'read-only', message: '' };
    }
    try {
      const disk = await this.app.serviceManager.contents.get(path, { content: false, hash: true });
      const changed =
        mine && mine.hash && disk.hash
          ? mine.hash !== disk.hash
          : !!mine && new Date(disk.last_modified).getTime() - new Date(mine.last_modified).getTime() > MODIFIED_MARGIN_MS;
      if (changed) {
        return { path, outcome: 'conflict', message: '' };
      }
    } catch (error) {
      // a file gone from disk is saved anew; anything else is the save's to report
      if ((error as { response?: Response }).response?.status !== 404) {
        return { path, outcome: 'failed', message: String(error).slice(0, 200) };
      }
    }
    try {
      await context.save();
      return { path, outcome: 'saved', message: '' };
    } catch (error) {
      return { path, outcome: 'failed', message: String(error).slice(0, 200) };
    }
  }

  private async report(round: string, documents: IReport[], done: boolean): Promise<void> {
    const settings = this.app.serviceManager.serverSettings;
    const url = URLExt.join(settings.baseUrl, 'gpu-reclaim', 'saved');
    try {
      await ServerConnection.makeRequest(
        url,
        { method: 'POST', body: JSON.stringify({ round, tab: TAB, documents, done }) },
        settings
      );
    } catch {
      // the server is going: what it had is what the service records
    }
  }

  /** The notification and the status bar's note: what was saved, when, and what was not. */
  private tell(results: IReport[], stop: boolean): void {
    const at = new Date().toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
    const saved = results.filter(r => r.outcome === 'saved').map(r => r.path);
    const failed = results.filter(r => r.outcome !== 'saved');
    const when = stop ? 'as the GPU reclaim stops this server' : 'before the GPU reclaim stops this server';
    const lines = [];
    if (saved.length) {
      lines.push(`Saved ${saved.length} document${saved.length > 1 ? 's' : ''} at ${at} ${when}: ${saved.join(', ')}`);
    }
    for (const r of failed) {
      lines.push(`Not saved: ${r.path} (${NOT_SAVED[r.outcome] ?? r.outcome})`);
    }
    const message = lines.join('. ');
    if (failed.length) {
      Notification.warning(message, { autoClose: false });
    } else {
      Notification.info(message, { autoClose: false });
    }
    this.shown(`saved ${saved.length} at ${at}` + (failed.length ? `, ${failed.length} not` : ''), message);
  }

  private readonly app: JupyterFrontEnd;
  private readonly shown: (note: string, title: string) => void;
}
