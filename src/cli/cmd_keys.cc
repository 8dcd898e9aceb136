// tokenserve keys create|list|disable|rotate: API key administration (gateway/admin.h).
#include <iostream>

#include "cli/cli_util.h"
#include "gateway/admin.h"

namespace ts::cli {

int cmd_keys(int argc, char** argv) {
  CLI::App app("Create, list, disable and rotate API keys (stored as SHA-256 hashes)", "keys");
  app.require_subcommand(1);
  app.fallthrough();
  std::string ledger = gateway::kDefaultLedger;
  app.add_option("--ledger", ledger, "ledger database: SQLite file or postgresql:// URL")
      ->capture_default_str();

  gateway::KeysCreateArgs create;
  CLI::App* c = app.add_subcommand("create", "create a key; the key is printed alone on the last line");
  c->add_option("--tenant", create.tenant, "tenant (team) owning the key")->required();
  c->add_option("--app", create.app, "application within the tenant")->required();
  c->add_option("--rpm", create.rpm, "requests per minute for this key (0 = config default)");
  c->add_option("--tpm", create.tpm, "tokens per minute for this key (0 = config default)");
  c->add_option("--models", create.models, "comma-separated models it may use (default: all)");
  c->add_option("--tiers", create.tiers, "comma-separated tiers: interactive,batch (default: all)");
  c->add_option("--expires", create.expires, "expiry: 2027-01-01T00:00:00Z or a duration like 30d");

  std::string tenant;
  bool json = false;
  CLI::App* l = app.add_subcommand("list", "list keys (never their secrets)");
  l->add_option("--tenant", tenant, "only this tenant's keys");
  l->add_flag("--json", json, "one JSON object per line");

  std::string id;
  CLI::App* d = app.add_subcommand("disable", "disable a key at once");
  d->add_option("id", id, "key id (key_...)")->required();
  CLI::App* r = app.add_subcommand("rotate", "replace a key by a new secret; the old one is disabled");
  r->add_option("id", id, "key id (key_...)")->required();

  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  gateway::SystemClock clock;
  Status st;
  if (c->parsed()) {
    create.ledger = ledger;
    st = gateway::keys_create(create, clock, std::cout);
  } else if (l->parsed()) {
    st = gateway::keys_list(ledger, tenant, json, clock, std::cout);
  } else if (d->parsed()) {
    st = gateway::keys_disable(ledger, id, std::cout);
  } else {
    st = gateway::keys_rotate(ledger, id, clock, std::cout);
  }
  std::cout.flush();
  return st.ok() ? 0 : fail("keys", st.message());
}

}  // namespace ts::cli
