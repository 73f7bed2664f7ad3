// The staff desk refreshes itself: every few seconds it fetches the page's
// fragment (same numbers, same templates) and swaps it in. Paused while the
// tab is hidden; a failed fetch says so and keeps the last numbers.
(function () {
  const desk = document.getElementById("desk");
  if (!desk) return;
  const every = Number(desk.dataset.refreshSeconds || 10) * 1000;
  async function refresh() {
    if (document.hidden) return;
    try {
      const response = await fetch(desk.dataset.fragmentUrl, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      desk.innerHTML = await response.text();
    } catch (error) {
      const note = desk.querySelector(".desk-refresh");
      if (note) note.textContent = " — could not refresh (" + error.message + "); showing the last numbers read.";
    }
  }
  setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);
})();
