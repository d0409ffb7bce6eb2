package cardstream.fs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (`file:`), setting permissions through java.nio instead of a
 * process. Without Hadoop's native library, RawLocalFileSystem forks `chmod` for every file it
 * creates: each checkpoint file a micro-batch writes (offset log, commit log, every state
 * partition's changelog) cost a process start, a few milliseconds of a busy driver or task.
 * The permissions set are the same; only a sticky bit, which POSIX file attributes cannot
 * express, still goes to Hadoop's own way.
 */
public class NioLocalFileSystem extends LocalFileSystem {
    public NioLocalFileSystem() {
        super(new Raw());
    }

    public static class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {
                super.setPermission(p, permission);
                return;
            }
            String symbolic = permission.getUserAction().SYMBOL + permission.getGroupAction().SYMBOL
                    + permission.getOtherAction().SYMBOL;
            Files.setPosixFilePermissions(pathToFile(p).toPath(), PosixFilePermissions.fromString(symbolic));
        }
    }
}
