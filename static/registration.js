// Poll the registration's status and swap "Your ticket is being prepared"
// for "Open ticket" when the worker has made it. Without JavaScript the page
// still works: a refresh shows the current state.
(function () {
  "use strict";
  var box = document.getElementById("ticket-state");
  if (!box) return;
  var url = box.getAttribute("data-status-url");
  var delay = 1000;

  function showTicket(ticketUrl) {
    var p = document.createElement("p");
    p.className = "ready";
    var a = document.createElement("a");
    a.className = "button";
    a.href = ticketUrl;
    a.textContent = "Open ticket";
    p.appendChild(a);
    box.replaceChildren(p);
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.json();
      })
      .then(function (data) {
        if (data.ready) {
          showTicket(data.ticket_url);
        } else {
          setTimeout(poll, delay);
        }
      })
      .catch(function () {
        // Network trouble: back off gently, up to 15 s between tries.
        delay = Math.min(delay * 2, 15000);
        setTimeout(poll, delay);
      });
  }

  setTimeout(poll, delay);
})();
