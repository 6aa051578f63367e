// The daemon's files as another local user sees them. Run as root, a forked child drops to an
// unprivileged user (nobody) and tries, with plain system calls: connect(2) on the IPC and event
// sockets, open(2) on <data_dir>/token, tokens.json and curve/server.key. Each is refused with
// EACCES, and each file is 0600. With --group-access the sockets are 0660 and the token 0640: a
// member of the daemon's group connects and reads the token, tokens.json and the secret key stay
// private, and a user outside the group is still refused. A world-readable file in the same
// folder (curve/server.pub) is read by the same child, so a refusal is the file's own mode, not
// a folder the user cannot enter. The folders themselves are closed too (the data dir 0700, or
// 0750 with --group-access; curve/ and logs/ 0700): the test checks those modes, opens the
// folders (as root) to probe each file's own mode, then closes them again and checks that the
// folder alone refuses.

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <functional>

#include "daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

constexpr int kCannotSwitch = 250;  // the child could not become the user

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

struct User {
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;  // supplementary
};

// Runs `probe` in a child process as `user`; returns its result (an errno, 0 = allowed).
int as_user(const User& user, const std::function<int()>& probe) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(user.groups.size(), user.groups.data()) != 0 || ::setgid(user.gid) != 0 ||
        ::setuid(user.uid) != 0 || ::getuid() != user.uid) {
      ::_exit(kCannotSwitch);
    }
    ::_exit(probe());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

int connect_errno(const fs::path& socket_path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

int open_errno(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char c;
  const int err = ::read(fd, &c, 1) < 0 ? errno : 0;
  ::close(fd);
  return err;
}

// nobody, or the reason the test cannot run.
std::optional<User> nobody(std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root to act as a second user (setuid)";
    return std::nullopt;
  }
  const passwd* pw = ::getpwnam("nobody");
  if (!pw || pw->pw_uid == 0) {
    *why = "no unprivileged user 'nobody' on this machine";
    return std::nullopt;
  }
  return User{pw->pw_uid, pw->pw_gid, {}};
}

// Checks the modes spindled gave the data dir and its folders, then opens them to 0755 so the
// probes below reach each file's own mode (defence in depth: either refuses alone).
void expect_closed_folders_then_open(const fs::path& dir, mode_t data_mode) {
  EXPECT_EQ(mode_of(dir), data_mode);
  EXPECT_EQ(mode_of(dir / "curve"), 0700u);
  EXPECT_EQ(mode_of(dir / "logs"), 0700u);
  for (const fs::path& d : {dir, dir / "curve"}) {
    fs::permissions(d, fs::perms(0755), fs::perm_options::replace);
  }
}

// Skips unless `user` can enter `dir` (the world-readable control file is readable).
#define SKIP_UNLESS_REACHABLE(user, dir)                                                           \
  do {                                                                                             \
    const int control = as_user(user, [&] { return open_errno((dir) / "curve" / "server.pub"); }); \
    if (control == kCannotSwitch) GTEST_SKIP() << "cannot switch to uid " << (user).uid;           \
    if (control != 0) {                                                                            \
      GTEST_SKIP() << "uid " << (user).uid << " cannot reach " << (dir) << " ("                    \
                   << std::strerror(control) << "): put TMPDIR somewhere others may enter";        \
    }                                                                                              \
  } while (0)

TEST(LocalUsers, AnotherUserCannotConnectNorReadSecrets) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  std::string why;
  const std::optional<User> other = nobody(&why);
  if (!other) GTEST_SKIP() << why;
  // --tcp so the CURVE server keys exist too.
  Daemon d(fresh_dir("local_users"), {"--tcp", "tcp://127.0.0.1:*"});
  const fs::path dir = d.data_dir();
  expect_closed_folders_then_open(dir, 0700);
  SKIP_UNLESS_REACHABLE(*other, dir);

  for (const char* f :
       {"token", "tokens.json", "curve/server.key", "spindled.sock", "spindled-events.sock"}) {
    EXPECT_EQ(mode_of(dir / f), 0600u) << f;
  }
  for (const char* s : {"spindled.sock", "spindled-events.sock"}) {
    EXPECT_EQ(as_user(*other, [&] { return connect_errno(dir / s); }), EACCES) << s;
  }
  for (const char* f : {"token", "tokens.json", "curve/server.key"}) {
    EXPECT_EQ(as_user(*other, [&] { return open_errno(dir / f); }), EACCES) << f;
  }
  // The data dir alone refuses too, once closed again as spindled leaves it.
  fs::permissions(dir, fs::perms(0700), fs::perm_options::replace);
  EXPECT_EQ(as_user(*other, [&] { return connect_errno(dir / "spindled.sock"); }), EACCES);
  // The owner is served on the same socket (the refusal above is not a dead socket).
  EXPECT_EQ(connect_errno(dir / "spindled.sock"), 0);
  RawClient owner(d.ipc(), d.token());
  EXPECT_EQ(owner.ok<HandshakeReply>(Op::handshake, HandshakeRequest{"owner"}).tenant, "local");
  EXPECT_EQ(d.terminate(), 0);
  fs::remove_all(dir);
}

TEST(LocalUsers, GroupAccessOpensSocketAndTokenToTheGroupOnly) {
  if (!fs::exists(stories_model())) GTEST_SKIP() << "fixture missing: " << stories_model();
  std::string why;
  const std::optional<User> outsider = nobody(&why);
  if (!outsider) GTEST_SKIP() << why;
  User member = *outsider;
  member.groups = {::getegid()};  // the daemon's group (what the system service's users join)
  Daemon d(fresh_dir("local_group"), {"--tcp", "tcp://127.0.0.1:*", "--group-access", "true"});
  const fs::path dir = d.data_dir();
  expect_closed_folders_then_open(dir, 0750);
  SKIP_UNLESS_REACHABLE(*outsider, dir);

  EXPECT_EQ(mode_of(dir / "spindled.sock"), 0660u);
  EXPECT_EQ(mode_of(dir / "token"), 0640u);
  EXPECT_EQ(mode_of(dir / "tokens.json"), 0600u);
  EXPECT_EQ(mode_of(dir / "curve" / "server.key"), 0600u);
  EXPECT_EQ(as_user(member, [&] { return connect_errno(dir / "spindled.sock"); }), 0);
  EXPECT_EQ(as_user(member, [&] { return open_errno(dir / "token"); }), 0);
  EXPECT_EQ(as_user(member, [&] { return open_errno(dir / "tokens.json"); }), EACCES);
  EXPECT_EQ(as_user(member, [&] { return open_errno(dir / "curve" / "server.key"); }), EACCES);
  EXPECT_EQ(as_user(*outsider, [&] { return connect_errno(dir / "spindled.sock"); }), EACCES);
  EXPECT_EQ(as_user(*outsider, [&] { return open_errno(dir / "token"); }), EACCES);
  // As spindled leaves it (0750): the group enters, others do not.
  fs::permissions(dir, fs::perms(0750), fs::perm_options::replace);
  EXPECT_EQ(as_user(member, [&] { return connect_errno(dir / "spindled.sock"); }), 0);
  EXPECT_EQ(as_user(*outsider, [&] { return connect_errno(dir / "spindled.sock"); }), EACCES);
  EXPECT_EQ(d.terminate(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spindle::testing
