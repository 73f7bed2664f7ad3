// The door page: scan continuously, send each new code once with its own id,
// show the answer over the whole screen. Offline, judge by the digests loaded
// while online and queue the scans; send them when the network is back.
(function () {
  "use strict";
  const root = document.getElementById("door");
  const video = document.getElementById("camera");
  const status = document.getElementById("status");
  const answerBox = document.getElementById("answer");
  const sentence = document.getElementById("sentence");
  const detail = document.getElementById("detail");
  const doorInput = document.getElementById("door-name");
  const typed = document.getElementById("typed");
  const QUEUE = "nightjar-door-queue";
  const LIST = "nightjar-door-list";
  // Every answer with its timings (performance.now() ms), for the browser test.
  const log = (window.doorLog = []);
  let detector = null;
  if ("BarcodeDetector" in window) {
    try {
      detector = new window.BarcodeDetector({ formats: ["qr_code"] });
    } catch (error) {
      detector = null;
    }
  }
  const canvas = document.createElement("canvas");
  const context = canvas.getContext("2d", { willReadFrequently: true });
  let lastCode = null;
  let lastSeen = 0;
  let lastEmpty = 0; // the last frame without a code: a new code entered the view after it
  let busy = false;

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
  }

  function load(key, empty) {
    try {
      return JSON.parse(localStorage.getItem(key)) || empty;
    } catch (error) {
      return empty;
    }
  }

  function save(key, value) {
    localStorage.setItem(key, JSON.stringify(value));
  }

  async function sha256(text) {
    if (!(window.crypto && crypto.subtle)) return null;
    const bytes = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
    return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function showWaiting() {
    const waiting = load(QUEUE, []).length;
    if (navigator.onLine) status.textContent = waiting ? `online — ${waiting} scans waiting` : "online — scanning";
    else status.textContent = `offline — ${waiting} scans waiting`;
  }

  function show(answer, timing) {
    answerBox.className = "answer " + answer.colour;
    sentence.textContent = answer.sentence;
    detail.textContent =
      answer.colour === "green" && answer.ticket
        ? [answer.registration, answer.ticket].join(" · ")
        : answer.detail || "";
    if (navigator.vibrate) navigator.vibrate(answer.colour === "green" ? 80 : [200, 100, 200]);
    beep(answer.colour === "green" ? 880 : answer.colour === "amber" ? 520 : 220);
    log.push(Object.assign({}, answer, timing));
  }

  // A short tone per answer, once the browser allows sound (after a tap on the page).
  let audio = null;
  document.addEventListener("pointerdown", () => {
    if (!audio && window.AudioContext) audio = new AudioContext();
  });
  function beep(frequency) {
    if (!audio) return;
    try {
      const tone = audio.createOscillator();
      tone.frequency.value = frequency;
      tone.connect(audio.destination);
      tone.start();
      tone.stop(audio.currentTime + 0.15);
    } catch (error) {
      audio = null;
    }
  }

  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": root.dataset.csrf },
      body: JSON.stringify(body),
    });
    if (response.status >= 500) throw new Error("server answered " + response.status);
    const data = await response.json();
    if (!response.ok) return { colour: "red", sentence: data.error || "Error " + response.status, detail: "" };
    return data;
  }

  async function submit(code, timing) {
    const scan = { scan_id: newId(), code: code, door: doorInput.value, scanned_at: new Date().toISOString() };
    if (timing.typed) scan.typed = true;
    if (!navigator.onLine) return judgeOffline(scan, timing);
    try {
      const answer = await post(root.dataset.scanUrl, scan);
      show(answer, Object.assign(timing, { answeredAt: performance.now() }));
      if (answer.colour === "green") remember(await sha256(code.trim()));
    } catch (error) {
      // The network dropped mid-request: queue the scan with its id, so a
      // request that did arrive is not counted twice.
      await judgeOffline(scan, timing);
    }
  }

  // A guest this door let in is in: the list it holds says so until the next refresh.
  function remember(hash) {
    const list = load(LIST, { valid: [], checked_in: [] });
    if (hash && !list.checked_in.includes(hash)) {
      list.checked_in.push(hash);
      list.valid = list.valid.filter((known) => known !== hash);
      save(LIST, list);
    }
  }

  async function judgeOffline(scan, timing) {
    const list = load(LIST, { valid: [], checked_in: [] });
    const queue = load(QUEUE, []);
    const hash = await sha256(scan.code.trim());
    let answer;
    if (hash && (list.checked_in.includes(hash) || queue.some((q) => q.hash === hash && q.admitted))) {
      answer = { colour: "amber", sentence: "Already checked in", detail: "By the list this door holds (offline)." };
    } else if (hash && list.valid.includes(hash)) {
      answer = { colour: "green", sentence: "Welcome", detail: "A valid ticket by the list this door holds (offline)." };
      scan.admitted = true;
    } else {
      answer = {
        colour: "red",
        sentence: "Not a ticket for this evening",
        detail: "Not in the list this door holds (offline); it is sent when the network is back.",
      };
    }
    scan.offline = true;
    scan.hash = hash;
    queue.push(scan);
    save(QUEUE, queue);
    showWaiting();
    show(answer, Object.assign(timing, { answeredAt: performance.now(), offline: true }));
  }

  // Sends the queued scans; the same list sent twice changes nothing (scan ids).
  async function sync() {
    const queue = load(QUEUE, []);
    if (!queue.length || !navigator.onLine) return;
    const scans = queue.map(({ hash, ...scan }) => scan);
    const response = await fetch(root.dataset.syncUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": root.dataset.csrf },
      body: JSON.stringify({ scans: scans }),
    });
    if (!response.ok) return;
    const data = await response.json();
    const sent = new Set(data.answers.map((answer) => answer.scan_id));
    save(QUEUE, load(QUEUE, []).filter((scan) => !sent.has(scan.scan_id)));
    const conflicts = data.answers.filter((answer) => answer.conflict);
    if (conflicts.length) {
      show(
        {
          colour: "amber",
          sentence: `Conflict: ${conflicts.map((answer) => answer.ticket).join(", ")} let in twice`,
          detail: conflicts[0].sentence + "; the desk lists it.",
        },
        { synced: true },
      );
    }
    window.doorSyncs = (window.doorSyncs || 0) + 1;
    showWaiting();
  }

  async function refreshList() {
    if (!navigator.onLine) return;
    const response = await fetch(root.dataset.ticketsUrl, { credentials: "same-origin" });
    if (response.ok) {
      save(LIST, await response.json());
      window.doorListLoaded = true;
    }
  }

  function online() {
    showWaiting();
    sync()
      .then(refreshList)
      .catch(() => null)
      .finally(showWaiting);
  }

  async function decode() {
    if (detector) {
      const found = await detector.detect(video);
      return found.length ? found[0].rawValue : null;
    }
    const width = video.videoWidth;
    const height = video.videoHeight;
    if (!width) return null;
    const scale = Math.min(1, 640 / width);
    canvas.width = Math.round(width * scale);
    canvas.height = Math.round(height * scale);
    context.drawImage(video, 0, 0, canvas.width, canvas.height);
    const image = context.getImageData(0, 0, canvas.width, canvas.height);
    const code = window.jsQR(image.data, image.width, image.height, { inversionAttempts: "dontInvert" });
    return code ? code.data : null;
  }

  async function tick() {
    const started = performance.now();
    let code = null;
    try {
      code = await decode();
    } catch (error) {
      code = null;
    }
    if (code === null) {
      if (started - lastSeen > 1500) lastCode = null; // out of view: the same ticket may come again
      lastEmpty = started;
    } else {
      if (code !== lastCode && !busy) {
        lastCode = code;
        busy = true;
        const timing = { emptyAt: lastEmpty, seenAt: started, decodedAt: performance.now() };
        submit(code, timing).finally(() => (busy = false));
      }
      lastSeen = started;
    }
    setTimeout(tick, 50);
  }

  async function start() {
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "environment" }, audio: false });
      video.srcObject = stream;
      await video.play();
    } catch (error) {
      status.textContent = "No camera: type the ticket number below.";
      return;
    }
    window.doorDecoder = detector ? "BarcodeDetector" : "jsQR";
    showWaiting();
    tick();
  }

  typed.addEventListener("submit", (event) => {
    event.preventDefault();
    const field = document.getElementById("ticket-number");
    if (!field.value.trim()) return;
    submit(field.value.trim(), { typed: true, seenAt: performance.now() });
    field.value = "";
  });
  doorInput.value = root.dataset.door || localStorage.getItem("nightjar-door-name") || doorInput.value;
  doorInput.addEventListener("change", () => localStorage.setItem("nightjar-door-name", doorInput.value));
  window.addEventListener("online", online);
  window.addEventListener("offline", showWaiting);
  setInterval(online, 15000);
  online();
  start();
})();
