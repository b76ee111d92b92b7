// The JupyterLab extension's view of localtime.js (labextension/src/stopped.ts imports it).
/** Each `<time datetime>` under `root` written in the browser's zone ("08:33", "2026-12-05 08:33"). */
export function localTimes(root: ParentNode): void;
